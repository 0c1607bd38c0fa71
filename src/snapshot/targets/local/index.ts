import { createHash, randomBytes } from 'node:crypto';
import { closeSync, constants, createReadStream, existsSync, fstatSync, lstatSync, openSync, readdirSync, realpathSync, renameSync, rmdirSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { copyFile, open, type FileHandle } from 'node:fs/promises';
import { storeError, transientError, WardenError } from '../../../core/errors.js';
import { FILE_MODE, ensurePrivateDir, fsyncPath } from '../../layout.js';
import { atMost, hashing } from '../digest.js';
import { CLAIM_KEY, MANIFEST_KEY, TARGET_SNAPSHOT_NAME, checkNames, expandTilde, isFileBody, UnverifiedSnapshotError, type ObjectDigest, type SnapshotTarget, type TargetFactory } from '../types.js';
import type { LocalTargetConfig } from './schema.js';

/** Temp files are `.tmp-<random>-<name>` beside their final name, renamed into place once verified. */
const TMP = '.tmp-';
/** A stream's pieces are written in batches of about this many bytes. */
const WRITE_BATCH = 1024 * 1024;
/** A stream's bytes written before the disk is asked to write them (fdatasync), while the next ones are written. */
const SYNC_EVERY = 32 * 1024 * 1024;
/** Reads of a copy hashed back. */
const READ_BACK = 4 * 1024 * 1024;

/**
 * A stream written to `tmp`, hashed on the way in, once: every byte written is one hashed. Reading the file back
 * right after would read the page cache, which is what the writes put there; the size once fsynced is checked.
 * The pieces are written together (writev) once WRITE_BATCH bytes of them are there, one write in flight while the
 * next are made (an encrypted file: read, hashed, encrypted), and the disk is asked to write what is there every
 * SYNC_EVERY bytes, so that little is left for the fsync at the end.
 */
async function writeHashed(body: AsyncIterable<Uint8Array>, tmp: string): Promise<ObjectDigest> {
  const h = hashing(body);
  const fh = await open(tmp, 'wx', FILE_MODE);
  let writing: Promise<void> | undefined;
  let syncing: Promise<void> | undefined;
  let queued: Buffer[] = [];
  let queuedBytes = 0;
  let at = 0;
  let unsynced = 0;
  const write = async () => {
    await writing;
    writing = writeAll(fh, queued, at);
    at += queuedBytes;
    unsynced += queuedBytes;
    queued = [];
    queuedBytes = 0;
    if (unsynced >= SYNC_EVERY && !syncing) {
      unsynced = 0;
      syncing = fh.datasync().finally(() => (syncing = undefined));
    }
  };
  try {
    for await (const b of h.stream) {
      queued.push(b);
      queuedBytes += b.length;
      if (queuedBytes >= WRITE_BATCH) await write();
    }
    if (queuedBytes > 0) await write();
    await writing;
    await syncing;
    await fh.sync();
  } finally {
    await Promise.allSettled([writing, syncing]); // the descriptor stays open until what uses it is over
    await fh.close();
  }
  return h.digest();
}

/** All of `bufs` at `at`, whatever a short write leaves. */
async function writeAll(fh: FileHandle, bufs: Buffer[], at: number): Promise<void> {
  let { bytesWritten: done } = await fh.writev(bufs, at);
  const total = bufs.reduce((n, b) => n + b.length, 0);
  if (done === total) return;
  const whole = Buffer.concat(bufs);
  while (done < total) done += (await fh.write(whole, done, total - done, at + done)).bytesWritten;
}

/**
 * A local file copied to `tmp` by the kernel (copy_file_range: no byte passes through this process to be written),
 * then read back and hashed while the disk writes it (fsync): the digest is that of the copy itself, and the hash
 * and the disk's write overlap instead of following each other.
 */
async function copyHashed(file: string, tmp: string): Promise<ObjectDigest> {
  await copyFile(file, tmp, constants.COPYFILE_EXCL);
  const fh = await open(tmp, 'r');
  let synced: Promise<void> | undefined;
  try {
    await fh.chmod(FILE_MODE);
    synced = fh.sync();
    const hash = createHash('sha256');
    const bufs = [Buffer.allocUnsafe(READ_BACK), Buffer.allocUnsafe(READ_BACK)];
    let bytes = 0;
    // Two buffers: the next piece is read while this one is hashed.
    let reading = fh.read(bufs[0]!, 0, READ_BACK, 0);
    for (let i = 0; ; i ^= 1) {
      const { bytesRead } = await reading;
      if (bytesRead === 0) break;
      reading = fh.read(bufs[i ^ 1]!, 0, READ_BACK, bytes + bytesRead);
      hash.update(bufs[i]!.subarray(0, bytesRead));
      bytes += bytesRead;
    }
    await synced;
    return { bytes, sha256: hash.digest('hex') };
  } finally {
    await synced?.catch(() => undefined); // the descriptor stays open until its fsync is over
    await fh.close();
  }
}

/**
 * A folder on a mounted disk: temp file (a local file copied by the kernel and hashed back, a stream hashed as
 * written), fsync, size checked, rename; the manifest last.
 */
export class LocalTarget implements SnapshotTarget {
  readonly type = 'local';
  readonly name: string;
  readonly where: string;
  private readonly root: string;

  constructor(config: LocalTargetConfig, store: string) {
    this.name = config.name;
    this.root = join(expandTilde(config.path), store);
    this.where = this.root;
  }

  async put(snapshot: string, key: string, body: AsyncIterable<Uint8Array>): Promise<ObjectDigest> {
    checkNames(this.name, snapshot, key);
    const final = join(this.root, snapshot, key);
    ensurePrivateDir(dirname(final));
    const tmp = join(dirname(final), `${TMP}${randomBytes(4).toString('hex')}-${key.split('/').pop()}`);
    try {
      const sent = isFileBody(body) ? await copyHashed(body.file, tmp) : await writeHashed(body, tmp);
      const size = statSync(tmp).size;
      if (size !== sent.bytes) throw storeError(`target ${this.name}: ${tmp} is ${size} bytes once written, ${sent.bytes} bytes written`);
      renameSync(tmp, final);
      fsyncPath(dirname(final));
      return sent;
    } finally {
      rmSync(tmp, { force: true });
    }
  }

  async list(): Promise<string[]> {
    return this.folders().filter((n) => existsSync(join(this.root, n, MANIFEST_KEY)));
  }

  async keys(snapshot: string): Promise<string[]> {
    checkNames(this.name, snapshot);
    const dir = join(this.root, snapshot);
    if (!existsSync(dir)) return [];
    return (readdirSync(dir, { recursive: true }) as string[])
      .filter((rel) => !rel.split('/').pop()!.startsWith(TMP) && statSync(join(dir, rel)).isFile())
      .sort();
  }

  /**
   * Opened without following a link, inside the target's folder (no linked folder leads elsewhere), and only a
   * regular file: a FIFO would hold the reader, /dev/zero would never end. At most maxBytes + 1 bytes are read.
   */
  async get(snapshot: string, key: string, _signal: AbortSignal | undefined, maxBytes: number): Promise<AsyncIterable<Uint8Array>> {
    checkNames(this.name, snapshot, key);
    const path = join(this.root, snapshot, key);
    const refuse = (why: string, err?: unknown) => new UnverifiedSnapshotError(`target ${this.name}: ${path} ${why}`, { cause: err });
    let fd: number;
    try {
      if (realpathSync(dirname(path)) !== join(realpathSync(this.root), snapshot, dirname(key))) throw refuse('lies behind a link out of the target folder');
      fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') throw storeError(`target ${this.name}: ${path} does not exist`, err);
      if (code === 'ELOOP') throw refuse('is a link, not a file the target wrote', err);
      throw err instanceof WardenError ? err : storeError(`target ${this.name}: open ${path}: ${code ?? (err as Error).message}`, err);
    }
    if (!fstatSync(fd).isFile()) {
      closeSync(fd);
      throw refuse('is not a regular file');
    }
    return atMost(createReadStream(path, { fd, start: 0, end: maxBytes }), maxBytes, `target ${this.name}: ${path}`);
  }

  async names(): Promise<string[]> {
    return this.folders().filter((n) => (readdirSync(join(this.root, n), { recursive: true }) as string[]).some((rel) => statSync(join(this.root, n, rel)).isFile()));
  }

  async delete(snapshot: string): Promise<void> {
    checkNames(this.name, snapshot);
    const dir = join(this.root, snapshot);
    // A link put where a snapshot folder would be leads to something memory-warden did not write: never followed.
    if (lstatSync(dir, { throwIfNoEntry: false })?.isSymbolicLink()) throw new UnverifiedSnapshotError(`target ${this.name}: ${dir} is a link, not a snapshot folder the target wrote; not deleted`);
    if (!existsSync(dir)) return;
    // The manifest first, the claim last: every step of the way, what is left is proven memory-warden's.
    rmSync(join(dir, MANIFEST_KEY), { force: true });
    fsyncPath(dir);
    for (const e of readdirSync(dir).filter((n) => n !== MANIFEST_KEY && n !== CLAIM_KEY).sort()) rmSync(join(dir, e), { recursive: true, force: true });
    fsyncPath(dir);
    rmSync(join(dir, CLAIM_KEY), { force: true });
    rmdirSync(dir);
    fsyncPath(this.root);
  }

  async cleanPartial(): Promise<string[]> {
    const removed = this.temps();
    for (const t of removed) rmSync(join(this.root, t), { force: true });
    return removed.map((t) => `${this.name}:${t}`);
  }

  async leftovers(): Promise<string[]> {
    return this.temps().map((t) => `${this.name}:${t}`);
  }

  /** Temp files a killed put left, as `<snapshot>/<path>`. */
  private temps(): string[] {
    const out: string[] = [];
    for (const n of this.folders()) {
      for (const rel of readdirSync(join(this.root, n), { recursive: true }) as string[]) {
        if (rel.split('/').pop()!.startsWith(TMP)) out.push(`${n}/${rel}`);
      }
    }
    return out;
  }

  async close(): Promise<void> {}

  private folders(): string[] {
    if (!existsSync(this.root)) return [];
    return readdirSync(this.root).filter((n) => TARGET_SNAPSHOT_NAME.test(n) && lstatSync(join(this.root, n)).isDirectory()).sort();
  }
}

/** The base folder must exist: an unmounted disk is a failure to retry, not a folder to create on the root disk. */
export const createLocalTarget: TargetFactory<LocalTargetConfig> = async (config, store) => {
  if (!existsSync(expandTilde(config.path))) throw transientError(`target ${config.name}: ${config.path} does not exist (not mounted?)`);
  return new LocalTarget(config, store);
};
