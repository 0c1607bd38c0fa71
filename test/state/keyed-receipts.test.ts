import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openStateDb } from '../../src/state/state.js';
import { migrateState } from '../../src/state/migrate.js';
import { STATE_MIGRATIONS } from '../../src/state/migrations/index.js';
import { listReceipts } from '../../src/erase/receipts.js';
import { tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { fileBytes, guessedIn } from '../helpers/guesses.js';

/**
 * A state db made by the code before keyed receipts (version 8) holds unkeyed digests of who was erased, in its
 * receipts and in the results of erase jobs a worker ran. They cannot be re-keyed (that needs what they hashed), so
 * the upgrade drops them: no page, free page or WAL frame of the file keeps them, also when the process upgrading
 * it is killed before the file was compacted, or a reader held the WAL. Everything else is kept.
 */
const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');
const OLD = [
  { selector: 'user', digest: sha256('user:carol.danvers@example.org'), ids: sha256('m_0101\nm_0102') },
  { selector: 'subject', digest: sha256('subject:Carol Danvers'), ids: sha256('m_0103') },
  { selector: 'ids', digest: sha256('ids:m_0104\nm_0105'), ids: sha256('m_0104\nm_0105') },
];
const DIGESTS = new Map(OLD.flatMap((r) => [[r.digest, `${r.selector} selector`], [r.ids, `${r.selector} ids`]] as [string, string][]));

let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-keyed-receipts-');
});
afterEach(() => tmp.cleanup());

/**
 * Version 8 as that code left it: receipts written by its recordReceipt, an erase job's result as its worker
 * recorded it, a prune's. `holder` keeps a connection open so the last writes stay in the WAL, as on a live host.
 */
function version8(path: string): Database.Database {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  migrateState(db, path, STATE_MIGRATIONS.slice(0, 8));
  const holder = new Database(path);
  holder.prepare('SELECT 1').get();
  OLD.forEach((r, i) => {
    db.prepare(`INSERT INTO erase_receipts (store, layout, selector, selector_sha256, erased_at, memories, ids_sha256, counts, vacuumed, wal_truncated, snapshots_found, snapshots_deleted)
                VALUES ('agent', 'warden', ?, ?, ?, 2, ?, '{"rows":2}', 1, 1, '[]', '[]')`).run(r.selector, r.digest, `2026-11-2${i}T05:00:00.000Z`, r.ids);
    db.prepare(`INSERT INTO erase_receipt_places (receipt_id, place, count) VALUES (?, 'store:rows', 2)`).run(i + 1);
  });
  const receipt = { id: 9, store: 'agent', layout: 'warden', selector: 'user', selectorSha256: OLD[0]!.digest, erasedAt: '2026-11-29 05:00:00', dryRun: false, memories: 2, idsSha256: OLD[0]!.ids, counts: { rows: 2 } };
  db.prepare(`INSERT INTO job_runs (job, store, started_at, finished_at, outcome, result) VALUES ('erase', 'agent', '2026-11-29T05:00:00.000Z', '2026-11-29T05:00:01.000Z', 'ok', ?)`).run(JSON.stringify(receipt));
  db.prepare(`INSERT INTO job_runs (job, store, started_at, finished_at, outcome, result) VALUES ('prune', 'agent', '2026-11-29T03:00:00.000Z', '2026-11-29T03:00:01.000Z', 'ok', '{"deleted":3}')`).run();
  db.close();
  expect(guessedIn(fileBytes(path), DIGESTS).length).toBeGreaterThan(0); // what is there before
  return holder;
}

const raw = <T>(path: string, fn: (db: Database.Database) => T): T => {
  const db = new Database(path);
  try {
    return fn(db);
  } finally {
    db.close();
  }
};

describe('upgrading a state db whose receipts hold unkeyed digests', () => {
  it('drops them from receipts and erase job results, keeps everything else, and leaves them in no byte of the file or its WAL', () => {
    const path = join(tmp.dir, 'state.db');
    const holder = version8(path);
    try {
      openStateDb(path).close();
      // Read while another connection keeps the file open (a worker does): no close-time checkpoint tidies it.
      expect(guessedIn(fileBytes(path), DIGESTS)).toEqual([]);
    } finally {
      holder.close();
    }
    expect(raw(path, (db) => db.pragma('user_version', { simple: true }))).toBe(STATE_MIGRATIONS.length);
    const receipts = listReceipts(path);
    expect(receipts.map((r) => [r.selector, r.selector_sha256, r.ids_sha256, r.key_id, r.memories, r.erased_at])).toEqual(
      OLD.map((r, i) => [r.selector, null, null, null, 2, `2026-11-2${i}T05:00:00.000Z`]));
    expect(receipts.map((r) => JSON.parse(r.places))).toEqual(OLD.map(() => [{ place: 'store:rows', count: 2 }]));
    const runs = raw(path, (db) => db.prepare('SELECT job, result FROM job_runs ORDER BY id').all() as { job: string; result: string }[]);
    expect(JSON.parse(runs[0]!.result)).toMatchObject({ id: 9, selectorSha256: null, idsSha256: null, memories: 2, counts: { rows: 2 } });
    expect(runs[1]).toEqual({ job: 'prune', result: '{"deleted":3}' });
    expect(raw(path, (db) => db.prepare('SELECT count(*) FROM state_compaction').pluck().get())).toBe(0);
    expect(guessedIn(fileBytes(path), DIGESTS)).toEqual([]);

    // What the CLI shows of such a receipt: that its digest was dropped.
    const config = join(tmp.dir, 'config.yaml');
    writeFileSync(config, `stateDb: ${path}\n`);
    const list = cli(['erase', 'receipts', '--config', config]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout.split('\n').filter((l) => l.includes('(unkeyed digest dropped)'))).toHaveLength(3);
    expect(cli(['erase', 'receipts', '--config', config, '--json']).json<{ selector_sha256: unknown }[]>().map((r) => r.selector_sha256)).toEqual([null, null, null]);
  });

  it('killed -9 before the file was compacted (a reader held the WAL): the next open compacts it, and only then forgets to', async () => {
    const path = join(tmp.dir, 'state.db');
    const holder = version8(path);
    // A reader in a transaction from before the upgrade: the WAL cannot be truncated while it reads.
    holder.exec('BEGIN');
    holder.prepare('SELECT count(*) FROM erase_receipts').get();
    const state = JSON.stringify(fileURLToPath(new URL('../../dist/src/state/state.js', import.meta.url)));
    const child = spawn(process.execPath, ['--input-type=module', '-e', `const { openStateDb } = await import(${state}); openStateDb(process.argv[1]).close();`, path], { stdio: 'ignore' });
    const exited = new Promise((r) => child.once('exit', r));
    try {
      // Migrated (committed), then waiting for the reader to let go of the WAL: killed there.
      for (let i = 0; i < 500 && raw(path, (db) => db.pragma('user_version', { simple: true })) !== STATE_MIGRATIONS.length; i++) await new Promise((r) => setTimeout(r, 20));
      expect(raw(path, (db) => db.pragma('user_version', { simple: true }))).toBe(STATE_MIGRATIONS.length);
      child.kill('SIGKILL');
      await exited;
      expect(raw(path, (db) => db.prepare('SELECT reason FROM state_compaction').pluck().all())).toEqual(['009: unkeyed erase digests dropped']);
    } finally {
      holder.exec('COMMIT');
    }
    try {
      openStateDb(path).close();
      expect(raw(path, (db) => db.prepare('SELECT count(*) FROM state_compaction').pluck().get())).toBe(0);
      expect(guessedIn(fileBytes(path), DIGESTS)).toEqual([]);
    } finally {
      holder.close();
    }
    expect(listReceipts(path).map((r) => r.selector_sha256)).toEqual([null, null, null]);
  });
});
