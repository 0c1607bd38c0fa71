import { existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Config } from '../config/config.js';
import type { StoreConfig } from '../store/config.js';
import type { Logger } from '../log/logger.js';
import type { Clock } from '../time/instants.js';
import { toFolderStamp } from '../time/instants.js';
import { coerceError, configError, storeError, usageError } from '../core/errors.js';
import { withMaintenanceLock } from '../store/lock.js';
import { makeDirPrivate } from '../store/private-file.js';
import { collectionSnapshotsFor } from '../vectors/registry.js';
import { layoutFor } from '../layouts/registry.js';
import { copySqlite } from './sqlite-copy.js';
import { noteServerSnapshot, removeServerLeftovers } from './server-snapshots.js';
import { DIR_MODE, ensurePrivateDir, fsyncPath, lockSnapshots, sha256File, storeSnapshotDir, writePrivateFile } from './layout.js';
import { partialFolder, removePartials } from './copies.js';
import { eraseKey, eraseKeyId } from '../erase/key.js';
import { applyRetention, nextSeq } from './retention.js';
import type { Progress } from '../progress/progress.js';
import { copyHolds, holdsStream, holdsWatchCovers, tablesHoldsWatch, writeHolds } from './targets/holds.js';
import { openStore, openStoreOnEngine } from '../layouts/open.js';
import { engineFor } from '../engines/registry.js';
import type { AnyStoreHandle, EngineName, EngineTables, StoreEngine, TableRowsWatch } from '../engines/contract.js';
import { HOLDS_FILE, MANIFEST, MANIFEST_FORMAT, TABLES_DIR, VECTOR_TABLES_DIR, storePart, toolVersion, type FileEntry, type HoldsEntry, type Manifest, type QdrantPart, type SqlitePart, type TablesPart, type VectorTablesPart } from './manifest.js';

export interface SnapshotOptions {
  now: Clock;
  log: Logger;
  signal?: AbortSignal;
  reason?: Manifest['reason'];
  /** Take the store's maintenance lock (default). Restore, which already holds it, says false. */
  storeLock?: boolean;
  /** Bytes written so far, file by file, on a terminal (src/progress/progress.ts). */
  progress?: Progress;
}

export interface SnapshotResult {
  store: string;
  name: string;
  dir: string;
  skewMs: number;
  bytes: number;
  /** The memory table's rows in the copy (null: the layout has none, as Mastra's and mem0's). */
  rows: number | null;
  /** Rows per table in the copy. */
  tables: Record<string, number>;
  /** Rows per table of the vectors' tables taken apart from the store (the folder's `pgvector/`); empty: none. */
  vectorTables: Record<string, number>;
  points: Record<string, number>;
  /** Older snapshots deleted by retention. */
  pruned: string[];
  /** Leftovers of interrupted runs that were removed. */
  removedPartials: string[];
}

/** Every collection of a store: the configured ones, and for mem0 its memory and entity collections. */
export function snapshotCollections(store: StoreConfig): string[] {
  return layoutFor(store).collections(store);
}

const safeName = (name: string) => name.replace(/[^A-Za-z0-9_.-]/g, '_');

/** `2-my collection` → `2-my_collection.snapshot`: a safe file name, unique by index. Restore checks it (stage.ts). */
export function collectionFile(i: number, name: string): string {
  return `qdrant/${i}-${safeName(name)}.snapshot`;
}

/** The copy of a vector file in the snapshot folder, named after the file it restores. */
export function vectorFileCopy(i: number, source: string): string {
  return `vectors/${i}-${safeName(basename(source))}`;
}

const iso = (t: number) => new Date(t).toISOString();

/**
 * One coordinated snapshot of a store: the SQLite copy (or a database's tables) and every collection's Qdrant
 * snapshot, started together,
 * built in a `.partial-` folder, each part verified (integrity_check `ok`; sha256 equal to Qdrant's checksum),
 * the manifest written last, then the folder renamed into place. Any failure removes the partial folder and
 * leaves every earlier snapshot as it was. Writers of the store (prune, repair) are kept out meanwhile, so the
 * two parts are never split by memory-warden's own delete.
 */
export async function takeSnapshot(config: Config, storeName: string, opts: SnapshotOptions): Promise<SnapshotResult> {
  const storeConfig = config.stores[storeName];
  if (!storeConfig) throw usageError(`no store named "${storeName}"`);
  await assertSnapshotsTake(storeName, storeConfig);
  const engine = await engineFor(storeConfig);
  if (engine.tables) return tablesSnapshot(config, storeName, storeConfig, engine as StoreEngine & { tables: EngineTables<AnyStoreHandle> }, opts);
  openStore(config, storeName).close(); // the store must exist and be of its layout before anything is written
  const run = () => snapshotLocked(config, storeName, storeConfig, opts);
  return opts.storeLock === false ? run() : withMaintenanceLock(storeConfig.db, 'snapshot', run);
}

/** Refused, as a config error naming the field, when the store's layout says its vectors are out of a snapshot's reach. */
export async function assertSnapshotsTake(storeName: string, store: StoreConfig): Promise<void> {
  const refused = await layoutFor(store).snapshotRefused?.(store, storeName);
  if (refused) throw configError(`config: stores.${storeName}.${refused.field}: ${refused.why}: no snapshot or restore of this store`);
}

/**
 * A store that is a database (its engine has `tables`): opened by its engine, its tables checked by its layout, held
 * under the engine's maintenance lock (one across the fleet), its tables read by the engine at one instant into the
 * snapshot folder's `tables/` (restored by restore-tables.ts), started together with the snapshots of the Qdrant
 * collections beside it, exactly as a SQLite store's file is (buildParts).
 */
async function tablesSnapshot(config: Config, storeName: string, storeConfig: StoreConfig, engine: StoreEngine & { tables: EngineTables<AnyStoreHandle> }, opts: SnapshotOptions): Promise<SnapshotResult> {
  const handle = await openStoreOnEngine(config, storeName);
  try {
    const lock = opts.storeLock === false ? undefined : await engine.lock(handle, 'snapshot');
    try {
      return await snapshotLocked(config, storeName, storeConfig, opts, { engine: engine.name, tables: engine.tables, handle });
    } finally {
      await lock?.release();
    }
  } finally {
    await handle.close();
  }
}

async function snapshotLocked(config: Config, storeName: string, storeConfig: StoreConfig, opts: SnapshotOptions, db?: TablesSource): Promise<SnapshotResult> {
  const root = storeSnapshotDir(config, storeName);
  const lock = lockSnapshots(root, 'snapshot');
  try {
    const q = collectionSnapshotsFor(storeConfig);
    const removedPartials = await removePartials(root, q, opts.log);
    const removedServer = await removeServerLeftovers(root, q, snapshotCollections(storeConfig), opts.log);
    if (removedServer.length > 0) opts.log.warn({ store: storeName, removed: removedServer }, 'deleted server-side snapshots left by earlier runs');
    if (removedPartials.length > 0) opts.log.warn({ store: storeName, removed: removedPartials }, 'removed snapshot folders left by an interrupted run');
    const reason = opts.reason ?? 'scheduled';
    const startedAt = opts.now();
    const name = toFolderStamp(startedAt) + (reason === 'pre-restore' ? '-pre-restore' : '');
    const final = join(root, name);
    if (existsSync(final)) throw usageError(`snapshot ${final} already exists; one snapshot per store and second`);
    const tmp = partialFolder(root, name);
    mkdirSync(tmp, { mode: DIR_MODE }); // a new name: never a folder that was there
    makeDirPrivate(tmp);
    // The holds, made once here from the copy: every target's upload carries them, erase searches them. Made from
    // the SQLite copy while the copy's integrity_check runs on the other thread (they count only once it says ok:
    // until then the folder is a partial one); a database's, from its rows as they stream into the artifact (the
    // bytes its files' hashes are taken of, no second read), written while those files are checked.
    const key = ledgerKey(config, storeName, opts.log);
    const streamed = key && db && holdsWatchCovers(layoutFor(storeConfig).copyNames) ? tablesHoldsWatch(key) : undefined;
    let holdsMaking: Promise<HoldsEntry> | undefined;
    // With vector tables beside the file, the holds name theirs too: made once every part is verified.
    const makeHolds = key && !layoutFor(storeConfig).vectorTables?.(storeName, storeConfig) ? (copy: string) => {
      holdsMaking = writeHolds(streamed ? streamed.holds() : holdsStream(copy, key), key, join(tmp, HOLDS_FILE));
      holdsMaking.catch(() => undefined); // awaited below, or before the partial folder is removed
    } : undefined;
    try {
      const parts = await buildParts(root, tmp, storeName, storeConfig, config, opts, reason, db && streamed ? { ...db, rows: streamed.watch } : db, makeHolds);
      const holds = key && (await (holdsMaking ?? writeHolds(streamed ? streamed.holds() : copyHolds(tmp, parts, key), key, join(tmp, HOLDS_FILE))));
      const manifest: Manifest = { ...parts, name, seq: nextSeq(config, storeName), ...(key ? { eraseKeyId: eraseKeyId(key) } : {}), ...(holds ? { holds } : {}) };
      writePrivateFile(join(tmp, MANIFEST), JSON.stringify(manifest, null, 2) + '\n');
      fsyncPath(tmp);
      renameSync(tmp, final);
      fsyncPath(root);
      const bytes = Object.values(manifest.files).reduce((n, f) => n + f.bytes, 0);
      const pruned = reason === 'scheduled' ? await applyRetention(config, storeName, config.snapshot.keep, name, opts.log) : [];
      const points = Object.fromEntries(manifest.qdrant.map((p) => [p.collection, p.points]));
      opts.log.info({ store: storeName, dir: final, skewMs: manifest.skewMs, bytes, pruned: pruned.length }, 'snapshot done');
      return { store: storeName, name, dir: final, skewMs: manifest.skewMs, bytes, rows: storePart(manifest).rows, tables: storePart(manifest).tables, vectorTables: manifest.vectorTables?.tables ?? {}, points, pruned, removedPartials };
    } catch (err) {
      await holdsMaking?.catch(() => undefined); // nothing left writing into the folder as it goes
      rmSync(tmp, { recursive: true, force: true });
      throw err;
    } finally {
      streamed?.close();
    }
  } finally {
    lock.release();
  }
}

/**
 * The erase key the installation's state db is bound to (made now if it has none yet), named in the manifest: a
 * restore of this snapshot re-applies that key's erase ledger, and refuses where the state db is not bound to it
 * (src/erase/restore-ledger.ts), and its holds are made with it. A key that cannot be had is logged and left out
 * (no holds either); the snapshot is still taken.
 */
function ledgerKey(config: Config, storeName: string, log: Logger): Buffer | undefined {
  try {
    return eraseKey(config);
  } catch (err) {
    log.warn({ store: storeName, err: (err as Error).message }, 'snapshot: the erase key cannot be read; the manifest names none, and a restore of it cannot prove the state db is the one that records what was erased since; its holds are made when it is pushed');
    return undefined;
  }
}

/** Where a snapshot of a database's store reads its tables: the engine's artifact, on the store's open handle. */
interface TablesSource {
  engine: EngineName;
  tables: EngineTables<AnyStoreHandle>;
  handle: AnyStoreHandle;
  /** One table's rows handed over as they are read (the holds made from them). */
  rows?: TableRowsWatch;
}

/**
 * Every part of the snapshot in `tmp`, verified. `whileChecked`: called with the store's SQLite copy once it is
 * written, while its integrity_check runs, or with a database's artifact folder once its rows are read (with
 * `db.rows`), while its files are checked (what reads the copy may overlap the check; it counts only if the check
 * passes, which this awaits).
 */
async function buildParts(root: string, tmp: string, storeName: string, storeConfig: StoreConfig, config: Config, opts: SnapshotOptions, reason: Manifest['reason'], db?: TablesSource, whileChecked?: (copy: string) => void): Promise<Manifest> {
  const collections = snapshotCollections(storeConfig);
  const q = collectionSnapshotsFor(storeConfig);
  if (collections.length > 0) ensurePrivateDir(join(tmp, 'qdrant'));
  const files: Record<string, FileEntry> = {};
  const started = opts.now();

  const sqlitePart = async (source = storeConfig.db, file = 'store.db', copied?: (copy: string) => void): Promise<SqlitePart> => {
    const at = opts.now();
    const path = join(tmp, file);
    // Hashed on this thread while the copy is checked on its own (the bytes no longer change once it is written).
    let hashed: Promise<FileEntry> | undefined;
    const copy = await copySqlite(source, path, config.busyTimeoutMs, layoutFor(storeConfig).sqliteEngine, () => {
      hashed = sha256File(path);
      hashed.catch(() => undefined); // awaited below
      copied?.(path);
    }).catch(async (err: unknown) => {
      await hashed?.catch(() => undefined);
      throw err;
    });
    if (copy.integrity !== 'ok') {
      await hashed?.catch(() => undefined);
      throw storeError(`snapshot ${storeName}: integrity_check of the copy of ${source} says "${copy.integrity.slice(0, 200)}"; previous snapshots kept`);
    }
    fsyncPath(path);
    files[file] = await (hashed ?? sha256File(path));
    opts.progress?.tick(files[file]!.bytes);
    const rows = copy.tables.memory ?? null;
    return { file, source, startedAt: iso(at), finishedAt: iso(opts.now()), integrity: copy.integrity, journalMode: copy.journalMode, tables: copy.tables, rows };
  };
  const tablesPart = async (source: TablesSource): Promise<TablesPart> => {
    const at = opts.now();
    const folder = join(tmp, TABLES_DIR);
    ensurePrivateDir(folder);
    await source.tables.take(source.handle, folder, source.rows ? { rows: source.rows } : {});
    if (source.rows) whileChecked?.(folder); // the holds of the rows just read, made while the files are checked
    // Verified as it lies on disk: every file against the artifact's own record, and hashed for the manifest (by that
    // same read where the engine says what it read).
    const got = await source.tables.verify(folder);
    for (const f of got.files) {
      fsyncPath(join(folder, f));
      files[`${TABLES_DIR}/${f}`] = got.digests?.[f] ?? await sha256File(join(folder, f));
      opts.progress?.tick(files[`${TABLES_DIR}/${f}`]!.bytes);
    }
    fsyncPath(folder);
    return {
      engine: source.engine, dir: TABLES_DIR, format: got.format, source: got.source, startedAt: iso(at), finishedAt: iso(opts.now()),
      takenAt: got.takenAt, tables: got.tables, rows: got.tables.memory ?? null,
    };
  };
  // A store's vectors in a database's tables of their own (mem0's pgvector beside its file, Mastra's PgVector on
  // another server than its PostgresStore): read at one instant, started with the rest beside a file; beside a
  // database's tables, read before them, which are read once these are done (two servers share no instant: what a
  // writer did in between is in the tables and not in the vectors; docs/mastra-layout.md, "snapshot / restore").
  const side = layoutFor(storeConfig).vectorTables?.(storeName, storeConfig);
  const vectorTablesPart = async (): Promise<VectorTablesPart> => {
    const at = opts.now();
    const folder = join(tmp, VECTOR_TABLES_DIR);
    ensurePrivateDir(folder);
    await side!.take(folder);
    const got = await side!.verify(folder);
    for (const f of got.files) {
      fsyncPath(join(folder, f));
      files[`${VECTOR_TABLES_DIR}/${f}`] = await sha256File(join(folder, f));
      opts.progress?.tick(files[`${VECTOR_TABLES_DIR}/${f}`]!.bytes);
    }
    fsyncPath(folder);
    return { engine: 'postgres', dir: VECTOR_TABLES_DIR, format: got.format, source: got.source, startedAt: iso(at), finishedAt: iso(opts.now()), takenAt: got.takenAt, tables: got.tables };
  };
  const vectorFiles = db ? [] : layoutFor(storeConfig).vectorFiles(storeConfig);
  if (vectorFiles.length > 0) ensurePrivateDir(join(tmp, 'vectors'));
  const vectorFilePart = (source: string, i: number) => sqlitePart(source, vectorFileCopy(i, source));

  const qdrantPart = async (collection: string, i: number): Promise<QdrantPart> => {
    const file = collectionFile(i, collection);
    const at = opts.now();
    const points = await q!.count(collection);
    // Noted beside the snapshots before it exists, forgotten once deleted: a run killed meanwhile, or a delete
    // that fails, leaves the note, and the next run deletes the server-side copy.
    const note = noteServerSnapshot(root, { collection, snapshot: null, kind: 'created' });
    const snap = await q!.createSnapshot(collection, opts.signal).catch((err: unknown) => {
      note.forget(); // no name to delete it by
      throw err;
    });
    note.name(snap.name);
    try {
      opts.signal?.throwIfAborted();
      const got = await q!.downloadSnapshot(collection, snap.name, join(tmp, file), opts.signal);
      if (!snap.checksum) throw storeError(`snapshot ${storeName}: Qdrant gave no checksum for ${collection}'s snapshot ${snap.name}: cannot verify it`);
      if (got.sha256 !== snap.checksum || got.bytes !== snap.size) {
        throw storeError(`snapshot ${storeName}: ${collection}'s snapshot ${snap.name} downloaded with sha256 ${got.sha256} (${got.bytes} bytes), Qdrant says ${snap.checksum} (${snap.size} bytes)`);
      }
      fsyncPath(join(tmp, file));
      files[file] = got;
      opts.progress?.tick(got.bytes);
    } finally {
      // The download is verified either way; a failed delete keeps the note, so the next run deletes it.
      await q!.deleteSnapshot(collection, snap.name).then(
        () => note.forget(),
        (err: unknown) => opts.log.warn({ store: storeName, collection, snapshot: snap.name, err: (err as Error).message }, 'could not delete the server-side snapshot; the next snapshot or restore deletes it'),
      );
    }
    return { collection, file, snapshot: snap.name, startedAt: iso(at), finishedAt: iso(opts.now()), qdrantChecksum: snap.checksum, points };
  };

  // Started together: the SQLite copy runs in a worker thread while the collections are snapshotted.
  opts.progress?.start('snapshot', undefined, 'bytes');
  const vectorsFirst = db && side ? vectorTablesPart() : undefined;
  const rows = vectorsFirst ? vectorsFirst.then(() => tablesPart(db!)) : db ? tablesPart(db) : sqlitePart(storeConfig.db, 'store.db', whileChecked);
  const settled = await Promise.allSettled([rows, ...collections.map(qdrantPart), ...vectorFiles.map(vectorFilePart), ...(side ? [vectorsFirst ?? vectorTablesPart()] : [])]);
  opts.progress?.done();
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) throw coerceError(failed.reason, `snapshot ${storeName}`);
  const values = settled.map((s) => (s as PromiseFulfilledResult<unknown>).value);
  const store = values[0] as SqlitePart | TablesPart;
  const qdrant = values.slice(1, 1 + collections.length) as QdrantPart[];
  const vectorParts = values.slice(1 + collections.length, 1 + collections.length + vectorFiles.length) as SqlitePart[];
  const vectorTables = side ? values[values.length - 1] as VectorTablesPart : undefined;
  for (const rel of Object.keys(files)) {
    const size = statSync(join(tmp, rel)).size;
    if (size !== files[rel]!.bytes) throw storeError(`snapshot ${storeName}: ${rel} is ${size} bytes on disk, ${files[rel]!.bytes} written`);
  }
  const starts = [store, ...qdrant, ...vectorParts, ...(vectorTables ? [vectorTables] : [])].map((p) => Date.parse(p.startedAt));
  const ends = [store, ...qdrant, ...vectorParts, ...(vectorTables ? [vectorTables] : [])].map((p) => Date.parse(p.finishedAt));
  return {
    format: MANIFEST_FORMAT,
    tool: { name: 'memory-warden', version: toolVersion() },
    store: storeName,
    layout: storeConfig.layout,
    reason,
    startedAt: iso(started),
    finishedAt: iso(opts.now()),
    skewMs: Math.max(...ends) - Math.min(...starts),
    ...(db ? { tables: store as TablesPart } : { sqlite: store as SqlitePart }),
    qdrant,
    ...(vectorParts.length > 0 ? { vectorFiles: vectorParts } : {}),
    ...(vectorTables ? { vectorTables } : {}),
    files,
  };
}
