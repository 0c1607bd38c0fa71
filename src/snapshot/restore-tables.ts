/**
 * Restore of a snapshot that holds a store's tables (its manifest's `tables`, the artifact of a store that is a
 * database: src/engines/contract.ts, EngineTables), into the store's configured place only:
 * 1. the snapshot's files were verified against its manifest (restore.ts), the artifact is checked against its own
 *    record, the snapshot must be of this store, its layout and its engine, and the erase ledger is loaded (a
 *    restore that cannot re-apply it is refused here, as on SQLite): before anything changes;
 * 2. under the engine's maintenance lock (one across the fleet), the undo snapshot of the store as it is (kind
 *    'pre-restore', as on SQLite: its tables and its collections; without one only --force goes on);
 * 3. the Qdrant collections beside the store are recovered from the snapshot, each noted in the restore's journal, as a
 *    SQLite store's are (resume.ts, recoverCollections); then the layout's vector tables apart from the store (Mastra's
 *    PgVector on another server: Layout.vectorTables), put back on their server and noted in the journal;
 * 4. the engine restores the tables all or nothing: staged, then, before they go live, the erase ledger is re-applied
 *    to them, to the restored collections and vector tables through the layout's own `erasedIn` and `erase` on that engine, then
 *    swapped in. A layout that cannot re-apply a ledger that holds anything refuses there: nothing is swapped, the
 *    collections are put back from the undo snapshot, which is then removed again, and the store is as it was.
 * The journal (journal.ts, kept among the store's snapshots on this host: restoreJournalBase) says what is done: a
 * restore killed between the collections and the tables' commit is finished by the next restore of the store, or
 * rolled back, as a SQLite store's is. The tables' own swap is one transaction of the database: a kill -9 leaves the
 * old tables or the new ones, and the journal records the tables' generation before it, so a restore killed after the
 * commit is not done again.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../log/logger.js';
import type { Config } from '../config/config.js';
import type { StoreConfig } from '../store/config.js';
import { usageError, type WardenError } from '../core/errors.js';
import { engineFor } from '../engines/registry.js';
import type { AnyStoreHandle, EngineTables, StoreEngine } from '../engines/contract.js';
import { jobsOf, layoutFor } from '../layouts/registry.js';
import { describeLedger, erasedSnapshotRecords, loadRestoreLedger, reapplyLedgerTo, type RestoreLedger } from '../erase/restore-ledger.js';
import { collectionSnapshotsFor } from '../vectors/registry.js';
import { JOURNAL_FORMAT, readJournal, removeJournal, restoreJournalBase, writeJournal, type RestoreJournal } from './journal.js';
import { finishRestore, recoverCollections, rollBack, type RestoreSide } from './resume.js';
import { collectionDestinations, verifySnapshot } from './stage.js';
import { removeServerLeftovers } from './server-snapshots.js';
import { storeSnapshotDir } from './layout.js';
import { snapshotCollections } from './create.js';
import type { Manifest, TablesPart } from './manifest.js';
import { undoSnapshot, type RestoreOptions, type RestoreResult } from './undo.js';

/**
 * Whether a restore of this snapshot into this store goes through the tables (either holds a database's tables):
 * the store's engine has a table artifact, or the snapshot holds one. A mismatch of the two is refused by
 * restoreTablesSnapshot, naming both.
 */
export async function restoresTables(store: StoreConfig, manifest: Manifest): Promise<boolean> {
  return manifest.tables !== undefined || (await engineFor(store)).tables !== undefined;
}

export async function restoreTablesSnapshot(config: Config, storeName: string, from: string, manifest: Manifest, opts: RestoreOptions): Promise<RestoreResult> {
  const storeConfig = config.stores[storeName]!;
  const engine = await engineFor(storeConfig) as StoreEngine<AnyStoreHandle>;
  const part = manifest.tables;
  const here = engine.describe(storeConfig);
  const tables = tablesOf(storeName, engine, manifest, from, storeConfig);
  await tables.verify(join(from, part!.dir));
  const inSnapshot = manifest.qdrant.map((p) => p.collection);
  const ledger = loadRestoreLedger(config, storeName, { madeUnder: manifest.eraseKeyId ?? opts.madeUnderKey, without: opts.withoutEraseLedger ?? false });

  const result: RestoreResult = {
    store: storeName, from, dryRun: opts.dryRun ?? false, steps: [], undo: null, rows: part!.rows, points: {}, erasedKeptOut: null, eraseLedger: describeLedger(ledger),
  };
  result.steps.push(`verified ${Object.keys(manifest.files).length} file(s) against the manifest's sha256, and the tables against their own record`);
  const erasedAt = manifest.name !== undefined ? erasedSnapshotRecords(config, storeName).get(manifest.name) : undefined;
  if (erasedAt !== undefined) result.steps.push(`${manifest.name} is a snapshot an erase removed (${erasedAt}): restored only with the erase ledger re-applied`);
  const q = collectionSnapshotsFor(storeConfig);
  for (const c of inSnapshot) await q!.collectionExists(c); // reachable now, or fail before anything changes
  const journal = restoreJournalBase(config, storeName);
  const pending = readJournal(journal);
  const plan = [
    ...(pending ? [`finish the interrupted restore from ${pending.from} first (journal ${journal})`] : []),
    `take a pre-restore snapshot of ${storeName}`,
    ...manifest.qdrant.map((p) => `recover Qdrant collection ${p.collection} from ${p.file} (${manifest.files[p.file]!.bytes} bytes, ${p.points} points at ${p.startedAt})`),
    ...(manifest.vectorTables ? [`replace ${layoutFor(storeConfig).vectorTables!(storeName, storeConfig)!.describe} with those read at ${manifest.vectorTables.takenAt} (${describeTables(manifest.vectorTables)})`] : []),
    ledger.key === null && ledger.missing !== undefined
      ? `NOT re-apply the erase ledger (${ledger.missing})`
      : `re-apply the erase ledger (${describeLedger(ledger)}) to the restored tables${manifest.vectorTables ? ', vector tables' : ''}${inSnapshot.length > 0 ? ' and collections' : ''} before they go live`,
    `replace the tables of ${here} with the ${describeTables(part!)} read from ${part!.source} at ${part!.takenAt}, in one transaction`,
  ];
  if (result.dryRun) {
    result.steps.push(...plan.map((s) => `would ${s}`));
    return result;
  }

  const handle = await engine.open(storeName, storeConfig, {});
  try {
    const lock = await engine.lock(handle, 'restore');
    try {
      const removed = await removeServerLeftovers(storeSnapshotDir(config, storeName), q, snapshotCollections(storeConfig), opts.log);
      if (removed.length > 0) result.steps.push(`deleted ${removed.length} server-side snapshot(s) left by earlier runs`);
      const side = tablesRestore(config, storeName, engine, handle, opts, (j) => (j.eraseLedger === 'skipped' || j.from !== from ? undefined : ledger), result);
      const interrupted = readJournal(journal);
      if (interrupted) {
        const endedAt = await finishRestore(side, interrupted, opts.log, result.steps, result);
        if (endedAt === from) {
          result.undo = interrupted.undo;
          return await done(result, q, inSnapshot, opts.log);
        }
      }
      result.undo = await undoSnapshot(config, storeName, opts, result);
      const j: RestoreJournal = {
        format: JOURNAL_FORMAT, store: storeName, from, undo: result.undo, direction: 'forward', recovered: [], sqliteDone: false,
        file: null, pid: process.pid, startedAt: new Date(opts.now()).toISOString(), ...(ledger.key === null && ledger.missing !== undefined ? { eraseLedger: 'skipped' as const } : {}),
        ...(opts.storeNaming !== undefined ? { namedBy: opts.storeNaming } : {}),
        tablesBefore: await tables.generation(handle),
      };
      writeJournal(journal, j);
      try {
        result.erasedKeptOut = await side.apply(j, from, manifest, result.steps);
      } catch (err) {
        await rollBack(side, j, err, opts.log);
        // Refused before the swap (the layout cannot re-apply the ledger there): the store is as it was (the collections
        // put back), and the undo snapshot this restore took of it goes again, so the refusal changes nothing.
        if (result.undo && (err as WardenError).kind === 'usage') rmSync(result.undo, { recursive: true, force: true });
        throw err;
      }
      removeJournal(journal);
    } finally {
      await lock.release();
    }
  } finally {
    await handle.close();
  }
  return done(result, q, inSnapshot, opts.log);
}

async function done(result: RestoreResult, q: ReturnType<typeof collectionSnapshotsFor>, collections: readonly string[], log: Logger): Promise<RestoreResult> {
  for (const c of collections) result.points[c] = await q!.count(c);
  log.info({ store: result.store, from: result.from, undo: result.undo, rows: result.rows, points: result.points, erasedKeptOut: result.erasedKeptOut }, 'restore done');
  return result;
}

/**
 * The store's engine's table artifact, when the snapshot is of this store, its layout and its engine, and holds exactly
 * the store's collections beside the tables: a usage error naming what does not fit, before anything changes.
 */
function tablesOf(storeName: string, engine: StoreEngine<AnyStoreHandle>, manifest: Manifest, from: string, storeConfig: StoreConfig): EngineTables<AnyStoreHandle> {
  const part = manifest.tables;
  if (manifest.store !== storeName) throw usageError(`${from} is a snapshot of store "${manifest.store}", not "${storeName}"`);
  if (manifest.layout !== storeConfig.layout) throw usageError(`${from} is a snapshot of a ${String(manifest.layout)} store; store "${storeName}" is ${storeConfig.layout}`);
  if (!part || !engine.tables || part.engine !== engine.name) {
    throw usageError(`${from} holds ${part ? `the tables of a ${part.engine} store` : 'a SQLite file'}; store "${storeName}" is a ${engine.name} store (${engine.describe(storeConfig)}): refused`);
  }
  if ((manifest.vectorFiles ?? []).length > 0) throw usageError(`${from} holds vector files beside the tables, which a ${engine.name} store does not have: refused`);
  // The layout's vector tables apart from the store's (Mastra's PgVector on another server) and the snapshot's: both or neither.
  const side = layoutFor(storeConfig).vectorTables?.(storeName, storeConfig);
  if (side && !manifest.vectorTables) throw usageError(`${from} holds no copy of ${side.describe}: it cannot restore both`);
  if (!side && manifest.vectorTables) throw usageError(`${from} holds vector tables (${manifest.vectorTables.source}), and store "${storeName}" keeps none apart from its tables: refused`);
  collectionDestinations(storeName, storeConfig, manifest, from);
  return engine.tables;
}

/**
 * A database store's restore as its journal sees it (resume.ts, RestoreSide): the collections recovered, then the tables
 * restored with the erase ledger re-applied to them and to the collections before they go live (`ledgerOf`: the ledger
 * this restore loaded for its own snapshot; undefined: read from the state db again, as a SQLite store's finish does).
 */
function tablesRestore(
  config: Config, storeName: string, engine: StoreEngine<AnyStoreHandle>, handle: AnyStoreHandle, opts: RestoreOptions,
  ledgerOf: (j: RestoreJournal) => RestoreLedger | undefined, result?: RestoreResult,
): RestoreSide {
  const journal = restoreJournalBase(config, storeName);
  const storeConfig = config.stores[storeName]!;
  const here = engine.describe(storeConfig);
  return {
    store: storeName,
    journal,
    async verify(dir) {
      const manifest = await verifySnapshot(dir);
      await tablesOf(storeName, engine, manifest, dir, storeConfig).verify(join(dir, manifest.tables!.dir));
      return manifest;
    },
    async apply(j, dir, manifest, steps) {
      const tables = engine.tables!;
      // Before anything changes: a ledger that cannot be read changes nothing.
      const ledger = ledgerOf(j) ?? loadRestoreLedger(config, storeName, { without: j.eraseLedger === 'skipped' });
      await recoverCollections(config, storeName, j, journal, dir, manifest, opts, steps);
      // The vector tables apart from the store's (Mastra's PgVector elsewhere) next, until the journal says so
      // (restoring them twice is the same); the ledger is re-applied to them with the tables' erase below, before the
      // tables go live: a kill -9 in between is finished by the next restore, which erases again.
      const side = manifest.vectorTables ? layoutFor(storeConfig).vectorTables?.(storeName, storeConfig) : undefined;
      if (manifest.vectorTables && !side) throw usageError(`${dir}: holds vector tables, and store "${storeName}" keeps none apart from its tables`);
      if (side && !j.vectorTablesDone) {
        const got = await side.restore(join(dir, manifest.vectorTables!.dir));
        j.vectorTablesDone = true;
        writeJournal(journal, j);
        steps.push(`replaced ${side.describe} with the snapshot's (${describeTables(got)}, read at ${got.takenAt})`);
      }
      if (j.sqliteDone) return null;
      const now = await tables.generation(handle);
      if (j.tablesBefore !== undefined && j.tablesBefore.some((t) => !now.includes(t))) {
        // The swap committed before the restore was cut short: its tables (the ledger re-applied in it) are live.
        j.sqliteDone = true;
        writeJournal(journal, j);
        steps.push(`the tables of ${here} were already restored from ${dir}`);
        return null;
      }
      j.tablesBefore = now;
      writeJournal(journal, j);
      const folder = join(dir, manifest.tables!.dir);
      let keptOut = 0;
      let needles: string[] = [];
      let erasedFrom: string[] | undefined;
      const restored = await tables.restore(handle, folder, {
        beforeSwap: async (staged) => {
          // The collections are the snapshot's already: what an erase took goes from them and from the staged tables.
          const kept = await reapplyLedgerTo(await jobsOf(staged), staged, storeName, ledger, opts);
          keptOut = kept.memories;
          needles = kept.needles ?? [];
          erasedFrom = kept.tables;
          steps.push(kept.step);
        },
      });
      j.sqliteDone = true;
      writeJournal(journal, j);
      if (result && dir === j.from) result.rows = restored.tables.memory ?? manifest.tables!.rows;
      steps.push(`replaced the tables of ${here} with the snapshot's (${describeTables({ tables: restored.tables })})`);
      // The erased rows were loaded and deleted inside the restore's transaction: their bytes stay in the new tables'
      // pages as dead tuples until the tables are rewritten, as after any erase (the engine's scrub).
      if (keptOut > 0) {
        // The tables the layout's erases deleted from, as an erase's own scrub (every restored table when it names none).
        const tables = erasedFrom?.filter((t) => t in restored.tables) ?? Object.keys(restored.tables);
        const scrub = await engine.scrubErased(handle, { tables, needles });
        const read = scrub.bytes ? `; their texts read back from the tables' files: ${scrub.bytes.verdict === 'clean' ? 'none left' : `${scrub.bytes.verdict.toUpperCase()}: run erase again for the same person`}` : '';
        steps.push(`rewrote the restored tables so the erased rows leave no bytes in them (vacuumed: ${scrub.vacuumed ? 'yes' : 'NO: run erase again for the same person'}${read})`);
        if (result && (!scrub.vacuumed || (scrub.bytes && scrub.bytes.verdict !== 'clean'))) {
          result.erasedLeft = `bytes of the erased memories may remain in the restored tables of ${here}: run erase again for the same person`;
        }
      }
      return keptOut;
    },
  };
}

/**
 * Worker start: the restore of a database store interrupted on this host (its journal among the store's snapshots
 * here), finished forward or rolled back under the engine's maintenance lock, as the next restore of the store would.
 * Null: there was none.
 */
export async function finishPendingTablesRestore(config: Config, storeName: string, opts: Pick<RestoreOptions, 'now' | 'log'>): Promise<string[] | null> {
  if (!readJournal(restoreJournalBase(config, storeName))) return null;
  const storeConfig = config.stores[storeName]!;
  const engine = await engineFor(storeConfig) as StoreEngine<AnyStoreHandle>;
  const handle = await engine.open(storeName, storeConfig, {});
  try {
    const lock = await engine.lock(handle, 'restore');
    try {
      const steps: string[] = [];
      const removed = await removeServerLeftovers(storeSnapshotDir(config, storeName), collectionSnapshotsFor(storeConfig), snapshotCollections(storeConfig), opts.log);
      if (removed.length > 0) steps.push(`deleted ${removed.length} server-side snapshot(s) left by earlier runs`);
      const j = readJournal(restoreJournalBase(config, storeName)); // read again under the lock: another may have finished it
      if (j) await finishRestore(tablesRestore(config, storeName, engine, handle, opts, () => undefined), j, opts.log, steps);
      return steps;
    } finally {
      await lock.release();
    }
  } finally {
    await handle.close();
  }
}

const describeTables = (p: Pick<TablesPart, 'tables'>) => Object.entries(p.tables).map(([t, n]) => `${t}: ${n} row(s)`).join(', ');
