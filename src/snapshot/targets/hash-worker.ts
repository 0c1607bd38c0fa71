import { createHash, type Hash } from 'node:crypto';
import { availableParallelism, loadavg } from 'node:os';
import { Worker } from 'node:worker_threads';

/**
 * sha256 of a stream on another thread, of the very bytes the stream hands on: each piece is copied (memcpy, about
 * twenty times faster than hashing it) into a shared buffer the hashing thread reads, before it is handed on. An
 * upload then hashes beside its other work (the cipher, the SSH channel, the next read) instead of after it: an
 * encrypted upload's two hashes (its plaintext, its ciphertext) no longer take turns with the cipher on one core.
 *
 * A stream is hashed here until OFFLOAD_AT bytes went past (claims, manifests: no thread is started for them); past
 * that, what was kept and everything after goes to the hashing thread, one per process, started on first use and
 * never keeping the process alive. Memory is bounded: SLOTS slots of SLOT bytes per stream; a stream waits for a
 * free slot when the thread is behind. Without an idle second core (spareCore), everything is hashed here.
 */

const SLOT = 1024 * 1024;
const SLOTS = 8;
/** A stream shorter than this is hashed on this thread. */
export const OFFLOAD_AT = 4 * 1024 * 1024;

const WORKER = `
const { parentPort } = require('node:worker_threads');
const { createHash } = require('node:crypto');
const streams = new Map();
parentPort.on('message', (m) => {
  try {
    if (m.op === 'open') streams.set(m.id, { hashes: m.algos.map((a) => createHash(a)), slots: (m.slots || []).map((s) => Buffer.from(s)) });
    else if (m.op === 'update') {
      const s = streams.get(m.id);
      const b = s.slots[m.slot].subarray(0, m.len);
      for (const h of s.hashes) h.update(b);
      parentPort.postMessage({ id: m.id, slot: m.slot });
    } else if (m.op === 'piece') {
      const s = streams.get(m.id);
      const b = Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength);
      for (const h of s.hashes) h.update(b);
      parentPort.postMessage({ id: m.id, piece: m.piece, digests: m.algos.map((a) => createHash(a).update(b).digest()) });
    } else if (m.op === 'digest') {
      const s = streams.get(m.id);
      streams.delete(m.id);
      parentPort.postMessage({ id: m.id, digests: s.hashes.map((h) => h.digest()) });
    } else if (m.op === 'drop') streams.delete(m.id);
  } catch (err) {
    parentPort.postMessage({ id: m.id, error: String(err && err.message || err) });
  }
});
`;

type Reply = { id: number; slot: number } | { id: number; piece: number; digests: Uint8Array[] } | { id: number; digests: Uint8Array[] } | { id: number; error: string };

interface Listener {
  reply(m: Reply): void;
  fail(err: Error): void;
}

let worker: Worker | undefined;
let nextId = 1;
const listeners = new Map<number, Listener>();

function listen(id: number, l: Listener): void {
  listeners.set(id, l);
  worker?.ref();
}

function unlisten(id: number): void {
  listeners.delete(id);
  if (listeners.size === 0) worker?.unref();
}

function hashThread(): Worker {
  if (worker) return worker;
  // Not the process's flags: `--input-type=module` would make the script a module, without `require`.
  const w = new Worker(WORKER, { eval: true, execArgv: [] });
  const gone = (err: Error) => {
    if (worker === w) worker = undefined;
    for (const l of [...listeners.values()]) l.fail(err);
    listeners.clear();
  };
  w.on('message', (m: Reply) => listeners.get(m.id)?.reply(m));
  w.once('error', gone);
  w.once('exit', (code) => gone(new Error(`the hashing thread exited with code ${code}`)));
  // Held (ref) only while a stream is hashed on it: an idle thread never keeps the process alive. After the
  // listeners: adding one holds the thread again.
  if (listeners.size === 0) w.unref();
  worker = w;
  return w;
}

/**
 * Whether a second core is there to hash on: more than one, and one of them idle on average over the last minute.
 * On a machine busy with other work (load average 16-18 on two cores) the thread was measured to cost more than it
 * saved (the copies and the thread itself, and no idle core to run it): BENCHMARKS.md. `always`/`never`: tests.
 */
let policy: 'auto' | 'always' | 'never' = 'auto';
export const hashThreadPolicy = (p: typeof policy) => void (policy = p);
const spareCore = () => policy === 'always' || (policy === 'auto' && availableParallelism() > 1 && loadavg()[0]! + 1 <= availableParallelism());
/** Whether a second core is there at all: for pieces shared with the thread, which cost it no copy (PieceHash). */
const secondCore = () => policy === 'always' || (policy === 'auto' && availableParallelism() > 1);

/**
 * When a stream is hashed on the hashing thread, given an idle second core: `always` (past OFFLOAD_AT bytes; the
 * thread is started at the first piece, so that it is ready by then), or `if-running`, only if the thread is already there: a stream that
 * is the only work of its process (a plain file written to a local folder) is hashed on its own thread, where the
 * writes already overlap it, and starting a thread for it would cost more than it saves.
 */
export type Offload = 'always' | 'if-running';

/**
 * One stream's sha256. `update` takes each piece before it is handed on (the piece may be reused afterwards) and
 * returns a promise only when it must wait for the hashing thread; `digest` once the stream ended; `drop` if it
 * did not.
 */
export class StreamHash {
  private kept: Buffer[] = [];
  private keptBytes = 0;
  private local: Hash | undefined;
  private remote: Remote | undefined;

  constructor(private readonly offload: Offload = 'if-running') {}

  update(b: Buffer): Promise<void> | void {
    if (this.remote) return this.remote.update(b);
    if (this.local) {
      this.local.update(b);
      return;
    }
    if (this.offload === 'always' && this.keptBytes === 0 && spareCore()) hashThread();
    this.kept.push(Buffer.from(b)); // a copy: the producer may reuse its buffer
    this.keptBytes += b.length;
    if (this.keptBytes < OFFLOAD_AT) return;
    const kept = this.kept;
    this.kept = [];
    // Copied to the thread only with an idle core to hash them on: the thread may be running for pieces it shares
    // (PieceHash), whatever the load.
    if ((this.offload === 'if-running' && !worker) || !spareCore()) {
      this.local = createHash('sha256');
      for (const k of kept) this.local.update(k);
      return;
    }
    this.remote = new Remote();
    return this.remote.updateAll(kept);
  }

  async digest(): Promise<string> {
    if (this.remote) return this.remote.digest();
    const h = this.local ?? createHash('sha256');
    for (const k of this.kept) h.update(k);
    this.kept = [];
    return h.digest('hex');
  }

  drop(): void {
    this.kept = [];
    this.remote?.drop();
  }
}

/** A stream hashed on the hashing thread: its slots shared with it, each posted once filled, freed once hashed. */
class Remote {
  private readonly id = nextId++;
  private readonly slots: Buffer[] = [];
  private readonly free: number[] = [];
  private current = -1;
  private used = 0;
  private waiting: { resolve(): void; reject(err: Error): void } | undefined;
  private result: { resolve(sha256: string): void; reject(err: Error): void } | undefined;
  private failure: Error | undefined;
  private readonly worker: Worker;

  constructor() {
    this.worker = hashThread();
    const shared = Array.from({ length: SLOTS }, () => new SharedArrayBuffer(SLOT));
    for (const [i, s] of shared.entries()) {
      this.slots.push(Buffer.from(s));
      this.free.push(i);
    }
    listen(this.id, {
      reply: (m) => {
        if ('slot' in m) {
          this.free.push(m.slot);
          const w = this.waiting;
          this.waiting = undefined;
          w?.resolve();
        } else if ('digests' in m) {
          unlisten(this.id);
          this.result?.resolve(Buffer.from(m.digests[0]!).toString('hex'));
        } else this.fail(new Error(`hashing thread: ${m.error}`));
      },
      fail: (err) => this.fail(err),
    });
    this.worker.postMessage({ op: 'open', id: this.id, algos: ['sha256'], slots: shared });
  }

  private fail(err: Error): void {
    this.failure ??= err;
    unlisten(this.id);
    this.waiting?.reject(err);
    this.result?.reject(err);
    this.waiting = this.result = undefined;
  }

  async updateAll(bufs: Buffer[]): Promise<void> {
    for (const b of bufs) await this.update(b);
  }

  /** Copies `b` into slots, posting each one filled; waits only when no slot is free. */
  update(b: Buffer): Promise<void> | void {
    let at = 0;
    while (at < b.length) {
      if (this.failure) throw this.failure;
      if (this.current < 0) {
        const slot = this.free.pop();
        if (slot === undefined) return this.wait().then(() => this.update(b.subarray(at)));
        this.current = slot;
        this.used = 0;
      }
      const n = b.copy(this.slots[this.current]!, this.used, at);
      at += n;
      this.used += n;
      if (this.used === SLOT) this.post();
    }
  }

  private post(): void {
    this.worker.postMessage({ op: 'update', id: this.id, slot: this.current, len: this.used });
    this.current = -1;
  }

  private wait(): Promise<void> {
    return new Promise((resolve, reject) => (this.waiting = { resolve, reject }));
  }

  digest(): Promise<string> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.current >= 0 && this.used > 0) this.post();
    return new Promise((resolve, reject) => {
      this.result = { resolve, reject };
      this.worker.postMessage({ op: 'digest', id: this.id });
    });
  }

  drop(): void {
    if (!listeners.has(this.id)) return;
    unlisten(this.id);
    this.worker.postMessage({ op: 'drop', id: this.id });
  }
}

export type Algo = 'sha256' | 'md5';

/**
 * Whole pieces (an S3 multipart upload's parts) hashed on the hashing thread, in order: each piece's own digests
 * (`pieceAlgos`), and the whole stream's (`algos`) at the end. Each piece is copied to the thread as it is posted,
 * unless it is in a SharedArrayBuffer (S3's part buffers): then it is shared, and must not change until its digests
 * are back (the whole stream's hashes have taken it by then). Without an idle second core, hashed here; with
 * `shared` (every piece in a SharedArrayBuffer: nothing is copied, so the thread costs no more than hashing here),
 * on the thread whenever there is a second core, idle or not.
 */
export class PieceHash {
  private readonly id = nextId++;
  private readonly pending = new Map<number, { resolve(d: Buffer[]): void; reject(err: Error): void }>();
  private result: { resolve(d: Buffer[]): void; reject(err: Error): void } | undefined;
  private failure: Error | undefined;
  private pieces = 0;
  private readonly local: Hash[] | undefined;
  private readonly worker: Worker | undefined;

  constructor(algos: Algo[], private readonly pieceAlgos: Algo[], pieces: 'any' | 'shared' = 'any') {
    if (!(pieces === 'shared' ? secondCore() : spareCore())) {
      this.local = algos.map((a) => createHash(a));
      return;
    }
    this.worker = hashThread();
    listen(this.id, {
      reply: (m) => {
        if ('piece' in m) {
          const p = this.pending.get(m.piece);
          this.pending.delete(m.piece);
          p?.resolve(m.digests.map((d) => Buffer.from(d)));
        } else if ('digests' in m) {
          unlisten(this.id);
          this.result?.resolve(m.digests.map((d) => Buffer.from(d)));
        } else if ('error' in m) this.fail(new Error(`hashing thread: ${m.error}`));
      },
      fail: (err) => this.fail(err),
    });
    this.worker.postMessage({ op: 'open', id: this.id, algos });
  }

  private fail(err: Error): void {
    this.failure ??= err;
    unlisten(this.id);
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    this.result?.reject(err);
    this.result = undefined;
  }

  /** The piece's digests (in `pieceAlgos` order); the piece goes into the whole stream's hashes in call order. */
  piece(b: Buffer): Promise<Buffer[]> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.local) {
      for (const h of this.local) h.update(b);
      return Promise.resolve(this.pieceAlgos.map((a) => createHash(a).update(b).digest()));
    }
    const piece = this.pieces++;
    const done = new Promise<Buffer[]>((resolve, reject) => this.pending.set(piece, { resolve, reject }));
    this.worker!.postMessage({ op: 'piece', id: this.id, piece, data: b, algos: this.pieceAlgos });
    return done;
  }

  /** The whole stream's digests (in `algos` order), once every piece was posted. */
  digest(): Promise<Buffer[]> {
    if (this.local) return Promise.resolve(this.local.map((h) => h.digest()));
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.result = { resolve, reject };
      this.worker!.postMessage({ op: 'digest', id: this.id });
    });
  }

  /** Stop: pieces not hashed yet fail (their uploads stop waiting for them). */
  drop(): void {
    if (this.local) this.failure ??= new Error('hashing stopped');
    if (this.local || !listeners.has(this.id)) return;
    this.fail(new Error('hashing stopped'));
    this.worker!.postMessage({ op: 'drop', id: this.id });
  }
}
