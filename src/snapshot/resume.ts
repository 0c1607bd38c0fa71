import { readdirSync, rmSync } from 'node:fs';
import { layoutFor } from '../layouts/registry.js';
import { basename, dirname, join } from 'node:path';
import type { Config } from '../config/config.js';
import type { Logger } from '../log/logger.js';
import type { Clock } from '../time/instants.js';
import type { Progress } from '../progress/progress.js';
import { storeError, usageError } from '../core/errors.js';
import { withMaintenanceLock } from '../store/lock.js';
import { collectionSnapshotsFor } from '../vectors/registry.js';
import type { CollectionSnapshots } from '../vectors/contract.js';
import { storeSnapshotDir } from './layout.js';
import type { Manifest, QdrantPart } from './manifest.js';
import { snapshotCollections } from './create.js';
import { finishCommand, journalPath, readJournal, removeJournal, writeJournal, type RestoreJournal } from './journal.js';
import { deleteIfThere, noteServerSnapshot, removeServerLeftovers, uploadName } from './server-snapshots.js';
import { destinations, replaceStoreFile, stageSqlite, stagingPath, storeUsers, verifySnapshot } from './stage.js';
import { localLeftovers, removeLocalCopy } from './copies.js';
import { loadRestoreLedger, reapplyLedger, type RestoreLedger } from '../erase/restore-ledger.js';

interface ApplyOptions {
  now: Clock;
  log: Logger;
  /** Bytes uploaded to Qdrant so far, on a terminal (src/progress/progress.ts). */
  progress?: Progress;
  /** The erase ledger to re-apply (src/erase/restore-ledger.ts); read from the state db when absent. */
  ledger?: RestoreLedger;
}

/** The ledger a restore journal's restore re-applies: the one given, else the state db's (refused if it is gone). */
function ledgerFor(config: Config, storeName: string, j: RestoreJournal, opts: ApplyOptions): RestoreLedger {
  return opts.ledger ?? loadRestoreLedger(config, storeName, { without: j.eraseLedger === 'skipped' });
}

/**
 * Leftovers of restores and snapshots killed earlier: staging copies beside every store file (every one is stale while
 * we hold the maintenance lock, which every restore holds), journal writes cut short, and server-side snapshots.
 * Only called under the lock.
 */
export async function clearLeftovers(config: Config, storeName: string, log: Logger, steps: string[]): Promise<void> {
  const storeConfig = config.stores[storeName]!;
  const stale = localLeftovers(config, storeName, ['staging']);
  for (const c of stale) removeLocalCopy(c);
  removeJournalTmp(storeConfig.db);
  if (stale.length > 0) steps.push(`removed ${stale.length} staging cop${stale.length === 1 ? 'y' : 'ies'} left by interrupted restores: ${stale.map((c) => c.path).join(', ')}`);
  const q = collectionSnapshotsFor(storeConfig);
  const removed = await removeServerLeftovers(storeSnapshotDir(config, storeName), q, snapshotCollections(storeConfig), log);
  if (removed.length > 0) steps.push(`deleted ${removed.length} server-side snapshot(s) left by earlier runs`);
}

/** Journal writes cut short (`<db>.warden-restore.json.tmp-<pid>`): no store data. Call only under the store's maintenance lock. */
function removeJournalTmp(dbPath: string): void {
  const journalTmp = `${basename(journalPath(dbPath))}.tmp-`;
  let names: string[];
  try {
    names = readdirSync(dirname(dbPath));
  } catch {
    return;
  }
  for (const n of names.filter((x) => x.startsWith(journalTmp))) rmSync(join(dirname(dbPath), n), { force: true });
}

/** A snapshot folder verified, and checked to be this store's as the config has it (it may have changed since). */
async function verifiedFor(config: Config, storeName: string, dir: string): Promise<Manifest> {
  const manifest = await verifySnapshot(dir);
  destinations(storeName, config.stores[storeName]!, manifest, dir);
  return manifest;
}

/** Is anything left by a killed restore (a journal, a staging copy beside a store file)? */
function restoreLeftovers(config: Config, storeName: string): boolean {
  return readJournal(config.stores[storeName]!.db) !== null || localLeftovers(config, storeName, ['staging']).length > 0;
}

/** Recover one collection by upload, the upload noted until it is deleted from the server again. */
async function recoverCollection(q: CollectionSnapshots, storeRoot: string, part: QdrantPart, file: string, opts: ApplyOptions): Promise<void> {
  const name = uploadName(opts.now());
  const note = noteServerSnapshot(storeRoot, { collection: part.collection, snapshot: name, kind: 'uploaded' });
  try {
    await q.recoverFromFile(part.collection, file, part.qdrantChecksum, name);
  } finally {
    // Qdrant keeps the upload in the collection's snapshot list, pre-erase data and all: never left there.
    await deleteIfThere(q, part.collection, name).then(
      () => note.forget(),
      (err: unknown) => opts.log.warn({ collection: part.collection, snapshot: name, err: (err as Error).message }, 'could not delete the uploaded snapshot; the next snapshot or restore deletes it'),
    );
  }
}

/**
 * Recover every collection of the snapshot `dir` the journal does not list as done, each noted in the journal (kept by
 * `journal`, its store's journal path: journal.ts) as it is: the Qdrant half of every restore, whatever holds the
 * store's rows (a SQLite file: applySnapshot; a database's tables: restore-tables.ts).
 */
export async function recoverCollections(
  config: Config, storeName: string, j: RestoreJournal, journal: string, dir: string, manifest: Manifest, opts: ApplyOptions, steps: string[],
): Promise<void> {
  const q = collectionSnapshotsFor(config.stores[storeName]!);
  const root = storeSnapshotDir(config, storeName);
  opts.progress?.start('recover', manifest.qdrant.filter((p) => !j.recovered.includes(p.collection)).reduce((n, p) => n + (manifest.files[p.file]?.bytes ?? 0), 0), 'bytes');
  for (const part of manifest.qdrant) {
    if (j.recovered.includes(part.collection)) continue;
    await recoverCollection(q!, root, part, join(dir, part.file), opts);
    opts.progress?.tick(manifest.files[part.file]?.bytes ?? 0);
    j.recovered.push(part.collection);
    writeJournal(journal, j);
    steps.push(`recovered Qdrant collection ${part.collection} from ${dir}`);
  }
  opts.progress?.done();
}

/**
 * Make both stores the snapshot `dir`'s, skipping what the journal says is done and recording each step in it:
 * every collection, then the store file (from `staged`, or staged now), with the erase ledger re-applied to the
 * restored store before its file replaces the store's (src/erase/restore-ledger.ts). Returns how many erased
 * memories the ledger kept out (null when the store file was already done).
 */
export async function applySnapshot(
  config: Config, storeName: string, j: RestoreJournal, dir: string, manifest: Manifest, staged: string | null, opts: ApplyOptions, steps: string[],
): Promise<number | null> {
  const storeConfig = config.stores[storeName]!;
  const ledger = ledgerFor(config, storeName, j, opts); // before anything changes: a missing ledger changes nothing
  await recoverCollections(config, storeName, j, storeConfig.db, dir, manifest, opts, steps);
  // The vectors' tables (mem0's pgvector) next, each time until the journal says so: restoring them twice is the same.
  const side = manifest.vectorTables ? layoutFor(storeConfig).vectorTables?.(storeName, storeConfig) : undefined;
  if (manifest.vectorTables && !side) throw storeError(`${dir}: holds vector tables, and store "${storeName}" keeps no vectors in a database`);
  if (side && !j.vectorTablesDone) {
    const got = await side.restore(join(dir, manifest.vectorTables!.dir));
    j.vectorTablesDone = true;
    writeJournal(storeConfig.db, j);
    steps.push(`replaced the tables of ${side.describe} with the snapshot's (${Object.entries(got.tables).map(([t, n]) => `${t}: ${n} row(s)`).join(', ')}, read at ${got.takenAt})`);
  }
  if (j.sqliteDone) return null;
  const copy = staged ?? stagingPath(storeConfig.db);
  let keptOut: number;
  try {
    if (!manifest.sqlite) throw storeError(`${dir}: holds no SQLite copy of the store`);
    if (!staged) stageSqlite(join(dir, manifest.sqlite.file), copy, manifest, config.busyTimeoutMs, j.file, opts.log, layoutFor(storeConfig).sqliteEngine);
    // The collections and vector files are the snapshot's now, the store file not yet: what an erase took goes from
    // all of them before the file that makes the restored store whole replaces the store's.
    const kept = await reapplyLedger(config, storeName, copy, ledger, opts);
    keptOut = kept.memories;
    steps.push(kept.step);
    replaceStoreFile(copy, storeConfig.db, config.busyTimeoutMs);
  } finally {
    if (!staged) rmSync(copy, { force: true });
  }
  j.sqliteDone = true;
  writeJournal(storeConfig.db, j);
  steps.push(`replaced ${storeConfig.db} with the copy from ${dir}`);
  return keptOut;
}

/**
 * One kind of restore as its journal's roll forward and roll back see it: where its journal is kept, how a snapshot
 * folder is checked to be the store's, and how one is applied to both stores (collections, then what holds the rows).
 * A SQLite store's (sqliteRestore, below); a database's tables (src/snapshot/restore-tables.ts).
 */
export interface RestoreSide {
  store: string;
  /** The journal's path, as journal.ts takes it. */
  journal: string;
  verify(dir: string): Promise<Manifest>;
  /** Applies `dir` as the journal says is left to do; how many erased memories the ledger kept out (null: rows done already). */
  apply(j: RestoreJournal, dir: string, manifest: Manifest, steps: string[]): Promise<number | null>;
}

/** A SQLite store's restore side: the journal beside its file, the store file swapped last. */
export function sqliteRestore(config: Config, storeName: string, opts: ApplyOptions): RestoreSide {
  return {
    store: storeName,
    journal: config.stores[storeName]!.db,
    verify: (dir) => verifiedFor(config, storeName, dir),
    apply: (j, dir, manifest, steps) => applySnapshot(config, storeName, j, dir, manifest, null, opts, steps),
  };
}

/** Turn the journal round: from now on the pre-restore snapshot is applied, to every collection and the file. */
function turnBack(journal: string, j: RestoreJournal): void {
  turn(journal, j, 'back');
}

function turnForward(journal: string, j: RestoreJournal): void {
  turn(journal, j, 'forward');
}

function turn(journal: string, j: RestoreJournal, direction: RestoreJournal['direction']): void {
  j.direction = direction;
  j.recovered = [];
  j.sqliteDone = false;
  if (j.tablesBefore) j.tablesBefore = [];
  if (j.vectorTablesDone !== undefined) j.vectorTablesDone = false;
  writeJournal(journal, j);
}

/**
 * A restore that failed in this process: put every collection back from the pre-restore snapshot (the journal
 * turned round first, so a crash now is rolled back, not forward, next time). Without a pre-restore snapshot, or
 * if putting back fails too, the journal is kept and the error says what to run.
 */
export async function rollBack(side: RestoreSide, j: RestoreJournal, cause: unknown, log: Logger): Promise<void> {
  const journal = side.journal;
  if (!j.undo) {
    throw storeError(`restore failed (${(cause as Error).message}) with no pre-restore snapshot to put back; the journal ${journalPath(journal)} is kept: run \`${finishCommand(j)}\` to finish it`, cause);
  }
  try {
    const undo = await side.verify(j.undo);
    const rowsReplaced = j.sqliteDone;
    const vectorTablesReplaced = j.vectorTablesDone === true;
    turnBack(journal, j);
    // What holds the rows is replaced last: unless that happened, only the collections (and vector tables) go back.
    j.sqliteDone = !rowsReplaced;
    if (!vectorTablesReplaced) j.vectorTablesDone = true;
    writeJournal(journal, j);
    await side.apply(j, j.undo, undo, []);
    removeJournal(journal);
    log.warn({ store: side.store, undo: j.undo }, 'restore failed; Qdrant collections put back from the pre-restore snapshot');
  } catch (err) {
    log.error({ store: side.store, undo: j.undo, err: (err as Error).message }, 'restore failed and putting Qdrant back failed too');
    throw storeError(
      `restore failed (${(cause as Error).message}) and putting Qdrant back failed (${(err as Error).message}); the store's ${j.tablesBefore !== undefined ? 'tables are' : 'SQLite file is'} unchanged; ` +
        `the journal ${journalPath(journal)} is kept: the next \`memory-warden restore\` of this store (or a worker start) rolls it back to ${j.undo} (or, when that cannot be read, forward to ${j.from})`,
      cause,
    );
  }
}

/**
 * Finish a restore that was interrupted (kill -9, power loss, a failed roll back) the way its journal points (forward
 * to its snapshot, or back to the pre-restore one) when that snapshot still verifies, else the other way, else
 * refuse loudly and change nothing. Under the store's maintenance lock. Returns the snapshot folder both stores
 * now hold; `kept` is told how many erased memories the erase ledger kept out (null: the store's rows were done).
 */
export async function finishRestore(side: RestoreSide, j: RestoreJournal, log: Logger, steps: string[], kept?: { erasedKeptOut: number | null }): Promise<string> {
  const journal = side.journal;
  let target = j.direction === 'forward' ? j.from : j.undo;
  let manifest: Manifest | undefined;
  let why = '';
  try {
    if (target) manifest = await side.verify(target);
  } catch (err) {
    why = (err as Error).message;
  }
  // The other way round, when this one's snapshot cannot be used: every step is then done again.
  const other = j.direction === 'forward' ? j.undo : j.from;
  if (!manifest && other) {
    try {
      manifest = await side.verify(other);
      log.warn({ store: side.store, from: j.from, undo: j.undo, direction: j.direction, why }, 'the interrupted restore cannot go on this way; going the other way');
      if (j.direction === 'forward') turnBack(journal, j);
      else turnForward(journal, j);
      target = other;
    } catch (err) {
      why += `; ${other}: ${(err as Error).message}`;
    }
  }
  if (!manifest || !target) {
    throw storeError(`finish the interrupted restore of store "${side.store}" (journal ${journalPath(journal)}): ${why || 'no pre-restore snapshot'}; neither finishing nor rolling back is possible: nothing was changed; put the snapshot folder back, or compare both stores by hand and then delete the journal`);
  }
  steps.push(`${j.direction === 'forward' ? 'finishing' : 'rolling back'} the restore from ${j.from} that was interrupted (journal ${journalPath(journal)})`);
  const keptOut = await side.apply(j, target, manifest, steps);
  if (kept) kept.erasedKeptOut = keptOut;
  removeJournal(journal);
  log.warn({ store: side.store, from: j.from, direction: j.direction, now: target }, 'interrupted restore finished');
  steps.push(`both stores are now ${target}`);
  return target;
}

/**
 * Worker start: finish the store's interrupted restore, if it has one, or say why not (the job runner then keeps
 * writers off the store), and remove staging copies of killed restores. Null when there was nothing to do.
 */
export async function finishPendingRestore(config: Config, storeName: string, opts: ApplyOptions & { force?: boolean }): Promise<string[] | null> {
  const db = config.stores[storeName]!.db;
  if (!restoreLeftovers(config, storeName)) return null;
  const users = readJournal(db) ? storeUsers(db) : [];
  if (users.length > 0 && !opts.force) throw usageError(`finish the interrupted restore of store "${storeName}": ${db} is in use (${users.join(', ')}): stop the agent first`);
  return withMaintenanceLock(db, 'restore', async () => {
    const steps: string[] = [];
    await clearLeftovers(config, storeName, opts.log, steps);
    const j = readJournal(db);
    if (j) await finishRestore(sqliteRestore(config, storeName, opts), j, opts.log, steps);
    return steps;
  });
}
