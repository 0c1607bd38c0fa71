import { Worker } from 'node:worker_threads';
import { createRequire } from 'node:module';

/**
 * Erase's second core: a worker thread with a connection of its own to the store, for the two whole-file passes
 * that need nothing from the main thread. quick_check runs while the main thread finds what to erase (a read
 * beside a read), and VACUUM with its checkpoint(TRUNCATE) runs while the main thread scrubs the state db and
 * searches the snapshots (after the deletes committed; the main connection stays idle meanwhile). Between the
 * deletes' transactions it runs the PASSIVE checkpoints erase asks for, so another writer's commits do not.
 *
 * Each call answers null when the thread could not do it at all (no thread, the file would not open there, a
 * function the schema needs that only the main connection has): the caller then does it on the store's own
 * connection, as before, and an error there names the file. The worker is eval'd source, so it runs the same from
 * dist/ and from the TypeScript sources under test.
 */
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const message = (err) => String((err && err.message) || err);
let db = null;
let openError = null;
try {
  db = new (require(workerData.driver))(workerData.path, { fileMustExist: true });
  db.pragma('busy_timeout = ' + workerData.busyMs);
  db.pragma('wal_autocheckpoint = 0');
  // SQLite's default page cache (2 MB) instead of better-sqlite3's 16 MB: VACUUM streams every page once, and the
  // larger cache only added 28 MB to peak RSS (1M rows), no speed.
  db.pragma('cache_size = -2000');
} catch (err) {
  openError = message(err);
}
const ops = {
  quick_check: () => db.pragma('quick_check(5)').map((r) => String(Object.values(r)[0])),
  checkpoint: () => { db.pragma('wal_checkpoint(PASSIVE)'); return null; },
  compact: () => {
    db.exec('VACUUM');
    const wal = String(db.pragma('journal_mode', { simple: true })).toLowerCase() === 'wal';
    if (!wal) return { vacuumed: true, walTruncated: true };
    const [r] = db.pragma('wal_checkpoint(TRUNCATE)');
    return { vacuumed: true, walTruncated: r !== undefined && r.busy === 0 && r.log === 0 };
  },
};
parentPort.on('message', ({ id, op }) => {
  if (op === 'close') { if (db) db.close(); parentPort.close(); return; }
  if (openError) return parentPort.postMessage({ id, error: openError });
  try { parentPort.postMessage({ id, result: ops[op]() }); }
  catch (err) { parentPort.postMessage({ id, error: message(err) }); }
});`;

export interface Compacted {
  vacuumed: boolean;
  /** False when a reader kept the WAL from being truncated. */
  walTruncated: boolean;
}

export interface StoreWorker {
  /** quick_check(5)'s lines ("ok" alone when intact); null: the thread could not run it. */
  quickCheck(): Promise<string[] | null>;
  /** A PASSIVE checkpoint, queued behind whatever runs (the worker takes its calls in order); not waited for. */
  checkpoint(): void;
  /** VACUUM, then wal_checkpoint(TRUNCATE); null: the thread could not (the caller does it on its connection). */
  compact(): Promise<Compacted | null>;
  close(): Promise<void>;
}

type Reply = { id: number; result?: unknown; error?: string };

export function startStoreWorker(path: string, busyMs: number): StoreWorker {
  let worker: Worker;
  try {
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    worker = new Worker(WORKER, { eval: true, workerData: { path, driver, busyMs } });
  } catch {
    return { quickCheck: async () => null, checkpoint: () => {}, compact: async () => null, close: async () => {} };
  }
  // Referenced throughout (the caller closes it in a finally): the main thread awaits its answers, and an
  // unreferenced worker let the process exit, silently and with status 0, while an answer or the exit was awaited.
  let next = 0;
  let dead = false;
  const pending = new Map<number, (r: Reply | null) => void>();
  const fail = () => {
    dead = true;
    for (const resolve of pending.values()) resolve(null);
    pending.clear();
  };
  worker.on('message', (r: Reply) => {
    pending.get(r.id)?.(r);
    pending.delete(r.id);
  });
  worker.on('error', fail);
  worker.on('exit', fail);
  const call = (op: string): Promise<Reply | null> => {
    if (dead) return Promise.resolve(null);
    const id = next++;
    return new Promise((resolve) => {
      pending.set(id, resolve);
      worker.postMessage({ id, op });
    });
  };
  return {
    async quickCheck() {
      const r = await call('quick_check');
      return r && Array.isArray(r.result) ? (r.result as string[]) : null;
    },
    checkpoint() {
      void call('checkpoint');
    },
    async compact() {
      const r = await call('compact');
      return r && r.result && typeof r.result === 'object' ? (r.result as Compacted) : null;
    },
    async close() {
      if (dead) return;
      const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
      worker.postMessage({ id: -1, op: 'close' });
      await exited;
    },
  };
}
