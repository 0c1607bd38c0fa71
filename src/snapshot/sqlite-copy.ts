import { execFile } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { storeError, coerceError } from '../core/errors.js';
import { FILE_MODE } from './layout.js';

export interface SqliteCopy {
  integrity: string;
  journalMode: string;
  tables: Record<string, number>;
}

/*
 * Runs off the event loop, so it keeps streaming Qdrant's snapshots while SQLite copies: VACUUM INTO is one long
 * synchronous call. Plain CommonJS evaluated in a worker thread or a child process (it cannot import this project's
 * TypeScript under the test runner). It only reads the source (not opened read-only: a read-only connection
 * cannot open a WAL store whose -shm is missing), and opens the copy only to check it.
 *
 * A libsql store is copied with better-sqlite3's backup (libsql's driver has none, and its VACUUM damages the vector
 * index's shadow table) in a child process of its own: two SQLite libraries in one process do not see each other's
 * locks (POSIX locks never conflict within a process), so better-sqlite3's close would checkpoint and delete the WAL
 * that a libsql connection of this process still writes to.
 */
const WORKER = `
const threads = require('node:worker_threads');
const workerData = threads.parentPort ? threads.workerData : JSON.parse(process.argv[1]);
const reply = threads.parentPort ? (m) => threads.parentPort.postMessage(m) : (m) => process.stdout.write(JSON.stringify(m));
const Database = require(workerData.driver);
const Checker = require(workerData.checker);
const { source, dest, busyTimeoutMs, backup } = workerData;
(async () => {
try {
  const src = new Database(source, { fileMustExist: true, timeout: busyTimeoutMs });
  let journalMode;
  try {
    src.pragma('foreign_keys = ON');
    src.pragma('busy_timeout = ' + busyTimeoutMs);
    journalMode = String(src.pragma('journal_mode', { simple: true })).toLowerCase();
    if (backup) await src.backup(dest);
    else src.prepare('VACUUM INTO ?').run(dest);
  } finally {
    src.close();
  }
  const copy = new Checker(dest, { fileMustExist: true });
  try {
    copy.pragma('journal_mode = DELETE'); // its own fresh copy: nobody else has it open
    // Written and in its final form: the caller may read it (hash it, make its holds) while it is checked here.
    if (threads.parentPort) reply({ copied: true });
    const integrity = copy.pragma('integrity_check').map((r) => r.integrity_check).join('; ');
    const tables = {};
    for (const { name } of copy.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all()) {
      tables[name] = copy.prepare('SELECT count(*) AS n FROM "' + name.replace(/"/g, '""') + '"').get().n;
    }
    reply({ ok: true, integrity, journalMode, tables });
  } finally {
    copy.close();
  }
} catch (err) {
  reply({ ok: false, message: String(err && err.message || err), code: err && err.code });
}
})();
`;

/**
 * A consistent copy of the store at `dest` (VACUUM INTO: one read transaction, so one instant of the store,
 * without blocking the agent's writer in WAL mode), then `PRAGMA integrity_check` on the copy. The copy is created
 * 0600 before SQLite writes into it; it is left in rollback-journal mode so it is one self-contained file.
 * `copied` is called once the copy is written and no longer changes, before its check ends (not for libsql): what
 * only reads it may start then, on this thread, while the check runs on its own; the promise still says whether
 * the copy is sound, and nothing read from it counts before it has.
 */
export function copySqlite(source: string, dest: string, busyTimeoutMs: number, engine?: 'libsql', copied?: () => void): Promise<SqliteCopy> {
  closeSync(openSync(dest, 'wx', FILE_MODE));
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  // A libsql store (Layout.sqliteEngine) is copied page by page (backup) and checked and counted through libsql.
  const checker = engine === 'libsql' ? createRequire(import.meta.url).resolve('libsql') : driver;
  const data = { driver, checker, source, dest, busyTimeoutMs, backup: engine === 'libsql' };
  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (m: { ok: boolean; message?: string; code?: string } & SqliteCopy) => {
      settled = true;
      if (m.ok) resolve({ integrity: m.integrity, journalMode: m.journalMode, tables: m.tables });
      else {
        const e = coerceError(Object.assign(new Error(m.message), { code: m.code }), `copy ${source} (${engine === 'libsql' ? 'backup' : 'VACUUM INTO'})`);
        reject(e.transient ? e : storeError(e.message, e));
      }
    };
    const failed = (err: unknown) => {
      settled = true;
      reject(coerceError(err, `copy ${source}`));
    };
    if (engine === 'libsql') {
      const child = execFile(process.execPath, ['-e', WORKER, JSON.stringify(data)], { maxBuffer: 64 * 1024 * 1024, env: process.env }, (err, stdout, stderr) => {
        let reply: Parameters<typeof settle>[0] | undefined;
        try {
          reply = JSON.parse(stdout);
        } catch {
          reply = undefined;
        }
        if (reply) settle(reply);
        else failed(err ?? storeError(`copy ${source}: the copying process printed no result (${String(stderr).trim().split('\n')[0] || 'no error output'})`));
      });
      child.stdin?.end();
      return;
    }
    const worker = new Worker(WORKER, { eval: true, workerData: data });
    worker.on('message', (m: Parameters<typeof settle>[0] | { copied: true }) => {
      if ('copied' in m) copied?.();
      else settle(m);
    });
    worker.once('error', failed);
    worker.once('exit', (code) => {
      if (!settled) reject(storeError(`copy ${source}: worker exited with code ${code}`));
    });
  });
}

/** `PRAGMA integrity_check` of a file through the layout's engine (libsql's driver reads its vector indexes). */
export function integrityOf(path: string, engine: 'libsql'): string {
  const Libsql = createRequire(import.meta.url)('libsql') as new (p: string, o: object) => { pragma(s: string): { integrity_check: string }[]; close(): void };
  const db = new Libsql(path, { fileMustExist: true });
  try {
    return db.pragma('integrity_check').map((r) => r.integrity_check).join('; ');
  } finally {
    db.close();
  }
}
