import { Worker } from 'node:worker_threads';
import { createRequire } from 'node:module';
import { busyTimeoutMs, type Db } from './sqlite.js';

/**
 * A second connection to a store on a worker thread: the whole-file passes that need nothing from the main thread
 * run there, on the second core, while the main thread goes on. Prune's checkpoints (src/store/checkpointer.ts),
 * check's integrity_check (src/layouts/warden/check.ts), the digest's review queue (src/layouts/warden/queue.ts), erase's quick_check, checkpoints and VACUUM
 * (src/erase/worker.ts) all go through it. Calls run in the order they were made.
 *
 * A call answers null when the thread could not run it at all (no thread, the thread died); `{ error }` when the
 * file would not open there or the operation failed: callers that can fall back do it on the store's own
 * connection, where an error names the file. The worker is eval'd source, so it runs the same from dist/ and from
 * the TypeScript sources under test.
 */
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver); // loaded as the thread starts: a spare thread has it ready
const message = (err) => String((err && err.message) || err);
const sleeper = new Int32Array(new SharedArrayBuffer(4));
let db = null;
let openError = null;
let busyMs = 0;
function open({ path, readonly, busy, cacheKb }) {
  try {
    db = new Database(path, { fileMustExist: true, readonly });
    if (busy !== undefined) db.pragma('busy_timeout = ' + busy);
    busyMs = busy || 0;
    db.pragma('wal_autocheckpoint = 0');
    if (cacheKb !== undefined) db.pragma('cache_size = -' + cacheKb);
    // The exact time rule (parseInstant, src/time/instants.ts) lives on the main thread: a statement that meets a time SQLite
    // cannot compare as canonical text fails here, and its caller runs it on the store's own connection.
    db.function('warden_epoch', { deterministic: true }, (_) => { throw new Error('warden_epoch is not on the store thread'); });
  } catch (err) {
    openError = message(err);
  }
}
const ops = {
  quick_check: () => db.pragma('quick_check(5)').map((r) => String(Object.values(r)[0])),
  integrity: ({ danglingSql, sample }) => {
    const integrity = db.pragma('integrity_check').map((r) => r.integrity_check);
    const ids = [];
    let count = 0;
    for (const id of db.prepare(danglingSql).pluck().iterate()) if (count++ < sample) ids.push(String(id));
    return { integrity, dangling: { count, ids } };
  },
  all: ({ sql, params }) => db.prepare(sql).all(params),
  checkpoint: () => { db.pragma('wal_checkpoint(PASSIVE)'); return null; },
  // Checkpoints on request until stopped, without a message per request (src/store/checkpointer.ts): the thread
  // waits on the shared counters, and starts the next checkpoint the moment one is asked for or the last ends.
  checkpoints: ({ signal }) => {
    const s = new Int32Array(signal);
    Atomics.store(s, 4, 1);
    Atomics.notify(s, 4);
    for (let done = Atomics.load(s, 2); ; ) {
      const asked = Atomics.load(s, 0);
      if (asked === done) {
        if (Atomics.load(s, 1) !== 0) return null;
        Atomics.wait(s, 0, asked);
        continue;
      }
      // Until every frame is copied: frames another connection committed while this one ran are copied at once, so
      // that its next commit finds the WAL fully copied (and starts it again from the top) instead of copying them
      // itself. Busy: another connection is checkpointing (the agent's commit, at its autocheckpoint): tried again
      // each millisecond. No progress (a reader still needs the frames left): until the next request.
      Atomics.store(s, 5, 1);
      Atomics.notify(s, 5);
      for (let copied = -1; Atomics.load(s, 1) === 0; ) {
        const r = db.pragma('wal_checkpoint(PASSIVE)')[0];
        if (r === undefined) break;
        if (r.busy === 1) { Atomics.wait(s, 3, 0, 1); continue; }
        if (r.checkpointed >= r.log || r.checkpointed <= copied) break;
        copied = r.checkpointed;
      }
      done = asked;
      Atomics.store(s, 2, done);
      Atomics.store(s, 5, 0);
      Atomics.notify(s, 2);
      Atomics.notify(s, 5);
    }
  },
  // truncateWal (src/store/sqlite.ts), here: tried again while another connection's checkpoint makes it busy.
  truncate: () => {
    const deadline = Date.now() + busyMs;
    for (;;) {
      const [r] = db.pragma('wal_checkpoint(TRUNCATE)');
      if (r === undefined) return false;
      if (r.busy === 0) return r.log === 0;
      if (Date.now() >= deadline) return false;
      Atomics.wait(sleeper, 0, 0, 10);
    }
  },
  compact: () => {
    db.exec('VACUUM');
    const wal = String(db.pragma('journal_mode', { simple: true })).toLowerCase() === 'wal';
    return { vacuumed: true, walTruncated: wal ? ops.truncate() : true };
  },
};
parentPort.on('message', ({ id, op, arg }) => {
  if (op === 'open') return open(arg);
  if (op === 'close') { if (db) db.close(); parentPort.close(); return; }
  if (openError) return parentPort.postMessage({ id, error: openError });
  try { parentPort.postMessage({ id, result: ops[op](arg) }); }
  catch (err) { parentPort.postMessage({ id, error: message(err) }); }
});`;

export type ThreadOp = 'quick_check' | 'integrity' | 'all' | 'checkpoint' | 'checkpoints' | 'truncate' | 'compact';

/** Below this file size a whole-file pass runs in less time than a thread takes to start (a V8 isolate, better-sqlite3 loaded again: 50–100 ms of CPU). */
export const THREAD_MIN_BYTES = 8 * 1024 * 1024;

/** The store file's size as SQLite sees it (pages × page size). */
export const storeBytes = (db: Db) => Number(db.pragma('page_count', { simple: true })) * Number(db.pragma('page_size', { simple: true }));

export type Reply = { result?: unknown; error?: string } | null;

export interface StoreThreadOptions {
  /** The connection's busy_timeout; unset: better-sqlite3's default. */
  busyMs?: number;
  readonly?: boolean;
  /** Page cache in KiB; unset: better-sqlite3's 16 MB. */
  cacheKb?: number;
}

export interface StoreThread {
  call(op: ThreadOp, arg?: unknown): Promise<Reply>;
  /** Closes the connection once the calls made before have run, then ends the thread. */
  close(): Promise<void>;
  /** Ends the thread now, whatever it is doing (a check that failed on the main thread). */
  terminate(): void;
}

let spare: Worker | undefined;

/**
 * Starts a thread now, with no store yet, for the next startStoreThread to take: a command that will want one
 * (the digest's review queue) asks for it first thing, and the thread's start (a V8 isolate, better-sqlite3 loaded:
 * 60–80 ms) overlaps the command's own (config, modules) instead of coming after it. Unreferenced until taken: an
 * unused spare does not keep the process alive.
 */
export function warmStoreThread(): void {
  if (spare) return;
  const worker = spawn();
  if (!worker) return;
  worker.unref();
  worker.on('error', () => {}); // a spare that failed to start is simply not there: startStoreThread spawns anew
  worker.once('exit', () => {
    if (spare === worker) spare = undefined;
  });
  spare = worker;
}

function spawn(): Worker | undefined {
  try {
    return new Worker(WORKER, { eval: true, workerData: { driver: createRequire(import.meta.url).resolve('better-sqlite3') } });
  } catch {
    return undefined;
  }
}

/** A thread whose connection is opened as the store's own is: read-only or not, the same busy timeout. */
export function startStoreThreadBeside(store: { db: Db; path: string }): StoreThread {
  return startStoreThread(store.path, { readonly: store.db.readonly, busyMs: busyTimeoutMs(store.db) });
}

export function startStoreThread(path: string, opts: StoreThreadOptions = {}): StoreThread {
  const worker = spare ?? spawn();
  spare = undefined;
  if (!worker) return { call: async () => null, close: async () => {}, terminate: () => {} };
  worker.ref();
  worker.postMessage({ id: -2, op: 'open', arg: { path, readonly: opts.readonly ?? false, busy: opts.busyMs, cacheKb: opts.cacheKb } });
  // Referenced until closed: the main thread awaits its answers, and an unreferenced worker let the process exit,
  // silently and with status 0, while an answer was still awaited. Every user closes it in a finally.
  let next = 0;
  let dead = false;
  const pending = new Map<number, (r: Reply) => void>();
  const fail = () => {
    dead = true;
    for (const resolve of pending.values()) resolve(null);
    pending.clear();
  };
  worker.on('message', (r: { id: number; result?: unknown; error?: string }) => {
    pending.get(r.id)?.(r);
    pending.delete(r.id);
  });
  worker.on('error', fail);
  const exited = new Promise<void>((resolve) => worker.once('exit', () => {
    fail();
    resolve();
  }));
  return {
    call(op, arg) {
      if (dead) return Promise.resolve(null);
      const id = next++;
      return new Promise((resolve) => {
        pending.set(id, resolve);
        worker.postMessage({ id, op, arg });
      });
    },
    async close() {
      if (!dead) worker.postMessage({ id: -1, op: 'close' });
      await exited;
    },
    terminate() {
      void worker.terminate();
    },
  };
}
