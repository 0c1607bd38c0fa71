import { Worker } from 'node:worker_threads';
import { createRequire } from 'node:module';

/**
 * WAL checkpoints on a thread of their own, with their own connection: the pages a prune batch wrote are copied
 * into the database file (and fsynced) on the second core while the next batch runs, instead of between the
 * two. WAL mode lets a checkpoint run beside a writer by design, so this changes when the copy happens, never
 * what ends up in the file. A passive checkpoint never waits for a lock and never blocks a writer.
 *
 * The worker is eval'd source, so it runs the same from dist/ and from the TypeScript sources under test.
 */
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const message = (err) => String((err && err.message) || err);
let db = null;
let openError = null;
try {
  db = new Database(workerData.path, { fileMustExist: true });
  db.pragma('wal_autocheckpoint = 0');
} catch (err) {
  openError = message(err);
}
parentPort.on('message', (m) => {
  if (m === 'close') { if (db) db.close(); parentPort.close(); return; }
  if (openError) return parentPort.postMessage(openError);
  try { db.pragma('wal_checkpoint(PASSIVE)'); parentPort.postMessage(null); }
  catch (err) { parentPort.postMessage(message(err)); }
});`;

export interface Checkpointer {
  /** Ask for a checkpoint; asks that arrive while one runs fold into one more run after it. */
  request(): void;
  /** Resolves once no checkpoint runs or waits; rejects with the first checkpoint's error. */
  idle(): Promise<void>;
  close(): Promise<void>;
}

export function startCheckpointer(path: string): Checkpointer {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(WORKER, { eval: true, workerData: { path, driver } });
  let running = false;
  let again = false;
  let failure: Error | null = null;
  let waiting: Array<() => void> = [];
  const run = () => {
    running = true;
    worker.postMessage('checkpoint');
  };
  const settle = () => {
    if (running) return;
    const wake = waiting;
    waiting = [];
    wake.forEach((f) => f());
  };
  worker.on('message', (err: string | null) => {
    if (err !== null) failure ??= new Error(`checkpoint ${path}: ${err}`);
    running = false;
    if (again && !failure) {
      again = false;
      run();
    }
    settle();
  });
  worker.on('error', (err) => {
    failure ??= new Error(`checkpoint ${path}: ${err.message || String(err)}`);
    running = false;
    settle();
  });
  const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
  return {
    request() {
      if (failure) return;
      if (running) again = true;
      else run();
    },
    async idle() {
      if (running) await new Promise<void>((resolve) => waiting.push(resolve));
      if (failure) throw failure;
    },
    async close() {
      await this.idle().catch(() => undefined);
      worker.postMessage('close');
      await exited;
    },
  };
}
