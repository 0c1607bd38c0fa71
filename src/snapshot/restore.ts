import { rmSync } from 'node:fs';
import { layoutFor } from '../layouts/registry.js';
import { join, resolve } from 'node:path';
import type { Config } from '../config/config.js';
import { storeError, usageError } from '../core/errors.js';
import { assertSnapshotsTake } from './create.js';
import { withMaintenanceLock } from '../store/lock.js';
import { sha256File } from './layout.js';
import { collectionSnapshotsFor } from '../vectors/registry.js';
import { undoSnapshot, type RestoreOptions, type RestoreResult } from './undo.js';
import { finishPendingTablesRestore, restoresTables, restoreTablesSnapshot } from './restore-tables.js';
import { engineFor } from '../engines/registry.js';
import type { Logger } from '../log/logger.js';
import type { Clock } from '../time/instants.js';
import { JOURNAL_FORMAT, journalPath, readJournal, removeJournal, writeJournal, type RestoreJournal } from './journal.js';
import { applySnapshot, clearLeftovers, finishPendingRestore, finishRestore, rollBack, sqliteRestore } from './resume.js';
import { destinations, fileOwner, replaceStoreFile, stageSqlite, stagingPath, storeUsers, verifySnapshot } from './stage.js';
import { describeLedger, erasedSnapshotRecords, loadRestoreLedger } from '../erase/restore-ledger.js';

export { storeUsers, verifySnapshot } from './stage.js';
export type { RestoreOptions, RestoreResult } from './undo.js';

/**
 * Restore one snapshot folder into its store, both stores or neither:
 * 1. every checksum in the manifest is verified, and every part's destination taken from the config (a manifest
 *    naming another store's file or collection is refused: stage.ts, destinations), before anything is touched;
 * 2. with the store's maintenance lock held and nobody else using the store (unless --force), the SQLite copy is
 *    staged beside the store file and checked, and a pre-restore snapshot of the current state is taken;
 * 3. each collection is recovered from its uploaded snapshot (priority=snapshot, checksum checked by Qdrant);
 * 4. the staged file atomically replaces the store file.
 * If a Qdrant recovery fails, collections already restored are put back from the pre-restore snapshot and the
 * store file is left untouched. A journal beside the store file records each step (src/snapshot/journal.ts), so a
 * restore killed half-way is finished (or rolled back) by the next restore or worker start.
 */
export async function restoreSnapshot(config: Config, storeName: string, dir: string, opts: RestoreOptions): Promise<RestoreResult> {
  const storeConfig = config.stores[storeName];
  if (!storeConfig) throw usageError(`no store named "${storeName}"`);
  await assertSnapshotsTake(storeName, storeConfig);
  const from = resolve(dir);
  const manifest = await verifySnapshot(from, opts.progress);
  // A store that is a database, or a snapshot of one: its tables are restored by its engine (restore-tables.ts).
  if (await restoresTables(storeConfig, manifest)) return restoreTablesSnapshot(config, storeName, from, manifest, opts);
  const sqlite = manifest.sqlite!;
  const vectorFiles = destinations(storeName, storeConfig, manifest, from);
  const inSnapshot = manifest.qdrant.map((p) => p.collection);
  if (inSnapshot.length > 0 && !storeConfig.qdrant) throw usageError(`${from} holds Qdrant collections but store "${storeName}" has no qdrant section`);
  const q = collectionSnapshotsFor(storeConfig);
  // The erase ledger, before anything changes: a restore that cannot re-apply it is refused here (restore-ledger.ts).
  const ledger = loadRestoreLedger(config, storeName, { madeUnder: manifest.eraseKeyId ?? opts.madeUnderKey, without: opts.withoutEraseLedger ?? false });

  const result: RestoreResult = {
    store: storeName, from, dryRun: opts.dryRun ?? false, steps: [], undo: null, rows: sqlite.rows, points: {}, erasedKeptOut: null, eraseLedger: describeLedger(ledger),
  };
  result.steps.push(`verified ${Object.keys(manifest.files).length} file(s) against the manifest's sha256`);
  const erasedAt = manifest.name !== undefined ? erasedSnapshotRecords(config, storeName).get(manifest.name) : undefined;
  if (erasedAt !== undefined) result.steps.push(`${manifest.name} is a snapshot an erase removed (${erasedAt}): restored only with the erase ledger re-applied`);
  const users = [storeConfig.db, ...vectorFiles.map((v) => v.dest)].flatMap(storeUsers);
  if (users.length > 0 && !opts.force) throw usageError(`${storeConfig.db} is in use (${users.join(', ')}): stop the agent first, or --force`);
  for (const c of inSnapshot) await q!.collectionExists(c); // reachable now, or fail before anything changes

  const pending = readJournal(storeConfig.db);
  const plan = [
    ...(pending ? [`finish the interrupted restore from ${pending.from} first (journal ${journalPath(storeConfig.db)})`] : []),
    `take a pre-restore snapshot of ${storeName}`,
    ...manifest.qdrant.map((p) => `recover Qdrant collection ${p.collection} from ${p.file} (${manifest.files[p.file]!.bytes} bytes, ${p.points} points at ${p.startedAt})`),
    ...vectorFiles.map(({ part: p, dest }) => `replace ${dest} with ${p.file} (${manifest.files[p.file]!.bytes} bytes at ${p.startedAt})`),
    ...(manifest.vectorTables ? [`replace the tables of ${layoutFor(storeConfig).vectorTables!(storeName, storeConfig)!.describe} with those read at ${manifest.vectorTables.takenAt} (${Object.entries(manifest.vectorTables.tables).map(([t, n]) => `${t}: ${n} row(s)`).join(', ')})`] : []),
    ledger.key === null && ledger.missing !== undefined
      ? `NOT re-apply the erase ledger (${ledger.missing})`
      : `re-apply the erase ledger (${describeLedger(ledger)}) to the restored store before its file goes live`,
    `replace ${storeConfig.db} with ${sqlite.file} (${manifest.files[sqlite.file]!.bytes} bytes, ${sqlite.rows ?? '?'} rows at ${sqlite.startedAt})`,
  ];
  if (result.dryRun) {
    result.steps.push(...plan.map((s) => `would ${s}`));
    return result;
  }

  await withMaintenanceLock(storeConfig.db, 'restore', async () => {
    await clearLeftovers(config, storeName, opts.log, result.steps);
    const interrupted = readJournal(storeConfig.db);
    if (interrupted) {
      const side = sqliteRestore(config, storeName, { ...opts, ledger: interrupted.eraseLedger === 'skipped' || interrupted.from !== from ? undefined : ledger });
      const endedAt = await finishRestore(side, interrupted, opts.log, result.steps, result);
      if (endedAt === from) {
        result.undo = interrupted.undo;
        return; // that was this very restore: it is done now
      }
    }
    const staged = stagingPath(storeConfig.db);
    const file = fileOwner(storeConfig.db);
    try {
      stageSqlite(join(from, sqlite.file), staged, manifest, config.busyTimeoutMs, file, opts.log, layoutFor(storeConfig).sqliteEngine);
      const check = await sha256File(join(from, sqlite.file));
      if (check.sha256 !== manifest.files[sqlite.file]!.sha256) throw storeError(`${from}: ${sqlite.file} changed while being restored`);
      result.steps.push(`staged the SQLite copy at ${staged} (integrity ok)`);

      result.undo = await undoSnapshot(config, storeName, opts, result);
      const journal: RestoreJournal = {
        format: JOURNAL_FORMAT, store: storeName, from, undo: result.undo, direction: 'forward', recovered: [], sqliteDone: false,
        file, pid: process.pid, startedAt: new Date(opts.now()).toISOString(), ...(ledger.key === null && ledger.missing !== undefined ? { eraseLedger: 'skipped' as const } : {}),
        ...(opts.storeNaming !== undefined ? { namedBy: opts.storeNaming } : {}),
      };
      writeJournal(storeConfig.db, journal);
      try {
        // mem0's SQLite vector files first, then the collections and the history (applySnapshot): a failure in
        // between leaves history as it was.
        for (const { part, dest } of vectorFiles) {
          const stagedVectors = stagingPath(dest);
          stageSqlite(join(from, part.file), stagedVectors, { ...manifest, sqlite: part }, config.busyTimeoutMs, fileOwner(dest), opts.log, layoutFor(storeConfig).sqliteEngine);
          replaceStoreFile(stagedVectors, dest, config.busyTimeoutMs);
          result.steps.push(`replaced ${dest}`);
        }
        result.erasedKeptOut = await applySnapshot(config, storeName, journal, from, manifest, staged, { ...opts, ledger }, result.steps);
      } catch (err) {
        await rollBack(sqliteRestore(config, storeName, { ...opts, ledger }), journal, err, opts.log);
        throw err;
      }
      removeJournal(storeConfig.db);
    } finally {
      rmSync(staged, { force: true });
    }
  });
  for (const c of inSnapshot) result.points[c] = await q!.count(c);
  opts.log.info({ store: storeName, from, undo: result.undo, points: result.points, erasedKeptOut: result.erasedKeptOut }, 'restore done');
  return result;
}

/**
 * Worker start: every store's interrupted restore finished, or logged as refused (its writers then stay off): a SQLite
 * store's (resume.ts), or a database store's, whose journal lies among its snapshots on this host (restore-tables.ts).
 */
export async function finishInterruptedRestores(config: Config, log: Logger, now: Clock): Promise<void> {
  for (const name of Object.keys(config.stores)) {
    try {
      const tables = (await engineFor(config.stores[name]!)).tables !== undefined;
      const steps = tables ? await finishPendingTablesRestore(config, name, { now, log }) : await finishPendingRestore(config, name, { now, log });
      if (steps && steps.length > 0) log.warn({ store: name, steps }, 'cleaned up after a restore that was interrupted');
    } catch (err) {
      log.error({ store: name, err: (err as Error).message }, 'a restore of this store was interrupted and cannot be finished now: its writers are refused until `memory-warden restore` finishes it');
    }
  }
}
