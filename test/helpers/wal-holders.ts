import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/**
 * Other connections to a WAL store, each on a thread of its own: a reader that holds a read snapshot for `holdMs`
 * (or, given `'until-released'`, until 200 ms after `release()`: however slowly the machine starts threads), and a checkpointer whose checkpoint(RESTART) holds SQLite's checkpointer lock while it waits for that reader.
 */
const DRIVER = createRequire(import.meta.url).resolve('better-sqlite3');
const HOLDER = `
const { parentPort, workerData } = require('node:worker_threads');
const db = new (require(workerData.driver))(workerData.path);
const sleep = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
if (workerData.role === 'reader') {
  db.exec('BEGIN');
  db.prepare('SELECT count(*) FROM memory').get(); // a read snapshot, held
  parentPort.postMessage('reading');
  if (workerData.holdMs === null) {
    Atomics.wait(new Int32Array(workerData.flag), 0, 0, 60000);
    sleep(200); // released: it lets go a moment later, while whoever released it waits on it
  } else sleep(workerData.holdMs);
  db.exec('COMMIT');
} else {
  db.pragma('busy_timeout = 3000');
  parentPort.postMessage('checkpointing');
  db.pragma('wal_checkpoint(RESTART)'); // holds the checkpointer lock while it waits for the reader
}
db.close();
parentPort.postMessage('done');`;

export interface Holder {
  /** It holds what it holds (the checkpointer: it is about to). */
  started: Promise<void>;
  /** It let go and closed its connection. */
  done: Promise<void>;
  /** A reader held until released lets go. */
  release(): void;
}

export function holder(path: string, role: 'reader' | 'checkpointer', holdMs: number | 'until-released' = 400): Holder {
  const flag = new SharedArrayBuffer(4);
  const worker = new Worker(HOLDER, { eval: true, workerData: { driver: DRIVER, path, role, holdMs: holdMs === 'until-released' ? null : holdMs, flag } });
  const started = new Promise<void>((resolve) => worker.once('message', () => resolve()));
  const done = new Promise<void>((resolve, reject) => {
    worker.on('message', (m) => m === 'done' && resolve());
    worker.once('error', reject);
  });
  const release = () => {
    Atomics.store(new Int32Array(flag), 0, 1);
    Atomics.notify(new Int32Array(flag), 0);
  };
  return { started, done, release };
}
