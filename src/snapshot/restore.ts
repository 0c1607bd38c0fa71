import { copyFileSync, existsSync, readdirSync, readlinkSync, realpathSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { Clock } from '../time.js';
import { storeError, usageError, WardenError } from '../errors.js';
import { openDatabase } from '../store/sqlite.js';
import { withMaintenanceLock } from '../store/lock.js';
import { QdrantStore } from '../vectors/qdrant/index.js';
import { fsyncPath, sha256File } from './layout.js';
import { readManifest, type Manifest } from './manifest.js';
import type { Progress } from '../progress.js';
import { snapshotCollections, takeSnapshot } from './create.js';
import { JOURNAL_FORMAT, journalPath, readJournal, removeJournal, writeJournal, type RestoreJournal } from './journal.js';
import { applySnapshot, clearLeftovers, fileOwner, finishRestore, keepOwner, rollBack, stagingPath, type FileOwner } from './resume.js';

export interface RestoreOptions {
  now: Clock;
  log: Logger;
  /** Restore even while another process has the store open, or without a pre-restore snapshot. */
  force?: boolean;
  dryRun?: boolean;
  /** Bytes verified, then bytes recovered into Qdrant, on a terminal (src/progress.ts). */
  progress?: Progress;
}

export interface RestoreResult {
  store: string;
  from: string;
  dryRun: boolean;
  /** What was (or, dry run, would be) done, in order. */
  steps: string[];
  /** The snapshot of the state before the restore: restore it to undo this one. */
  undo: string | null;
  rows: number | null;
  points: Record<string, number>;
}

/** Check every file the manifest lists, streamed: size and sha256. Throws naming the first file that differs. */
export async function verifySnapshot(dir: string, progress?: Progress): Promise<Manifest> {
  const manifest = readManifest(dir);
  const needed = [manifest.sqlite.file, ...manifest.qdrant.map((p) => p.file), ...(manifest.vectorFiles ?? []).map((p) => p.file)];
  for (const f of needed) if (!manifest.files[f]) throw storeError(`${dir}: manifest lists no checksum for ${f}`);
  progress?.start('verify', Object.values(manifest.files).reduce((n, f) => n + f.bytes, 0), 'bytes');
  for (const [rel, want] of Object.entries(manifest.files)) {
    const path = join(dir, rel);
    if (!existsSync(path)) throw storeError(`${dir}: ${rel} is missing`);
    const got = await sha256File(path);
    if (got.sha256 !== want.sha256 || got.bytes !== want.bytes) {
      throw storeError(`${dir}: ${rel} does not match its checksum (sha256 ${got.sha256}, ${got.bytes} bytes; manifest ${want.sha256}, ${want.bytes} bytes)`);
    }
    progress?.tick(want.bytes);
  }
  progress?.done();
  for (const p of manifest.qdrant) {
    if (manifest.files[p.file]!.sha256 !== p.qdrantChecksum) throw storeError(`${dir}: ${p.file} sha256 differs from Qdrant's checksum in the manifest`);
  }
  return manifest;
}

/** True when an exclusive lock cannot be had right now. A file SQLite cannot open has no SQLite users. */
function lockedByOthers(dbPath: string): boolean {
  let probe: ReturnType<typeof openDatabase>;
  try {
    probe = openDatabase(dbPath, { busyTimeoutMs: 0 });
  } catch {
    return false;
  }
  try {
    probe.pragma('locking_mode = EXCLUSIVE');
    probe.exec('BEGIN EXCLUSIVE');
    probe.exec('COMMIT');
    return false;
  } catch {
    return true;
  } finally {
    probe.close();
  }
}

/**
 * Who else has the store open: an exclusive-lock probe (catches every SQLite connection to a WAL store, idle ones
 * included) and, on Linux, the processes with the file open. Empty when nobody does.
 */
export function storeUsers(dbPath: string): string[] {
  if (!existsSync(dbPath)) return [];
  const users: string[] = [];
  if (lockedByOthers(dbPath)) users.push('a SQLite connection holds it open');
  const target = realpathSync(dbPath);
  let pids: string[] = [];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p) && Number(p) !== process.pid);
  } catch {
    return users; // no /proc: the lock probe is all there is
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        if (readlinkSync(`/proc/${pid}/fd/${fd}`) === target) {
          users.push(`process ${pid}`);
          break;
        }
      } catch {
        // the descriptor closed meanwhile
      }
    }
  }
  return users;
}

/**
 * Restore one snapshot folder into its store, both stores or neither:
 * 1. every checksum in the manifest is verified before anything is touched;
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
  const from = resolve(dir);
  const manifest = await verifySnapshot(from, opts.progress);
  if (manifest.store !== storeName) throw usageError(`${from} is a snapshot of store "${manifest.store}", not "${storeName}"`);
  const collections = snapshotCollections(storeConfig);
  const inSnapshot = manifest.qdrant.map((p) => p.collection);
  const absent = collections.filter((c) => !inSnapshot.includes(c));
  if (absent.length > 0) throw usageError(`${from} holds no snapshot of collection(s) ${absent.join(', ')}: it cannot restore both stores`);
  if (inSnapshot.length > 0 && !storeConfig.qdrant) throw usageError(`${from} holds Qdrant collections but store "${storeName}" has no qdrant section`);
  const q = storeConfig.qdrant ? new QdrantStore(storeConfig.qdrant) : undefined;

  const result: RestoreResult = { store: storeName, from, dryRun: opts.dryRun ?? false, steps: [], undo: null, rows: manifest.sqlite.rows, points: {} };
  result.steps.push(`verified ${Object.keys(manifest.files).length} file(s) against the manifest's sha256`);
  const vectorFiles = manifest.vectorFiles ?? [];
  const users = [storeConfig.db, ...vectorFiles.map((p) => p.source)].flatMap(storeUsers);
  if (users.length > 0 && !opts.force) throw usageError(`${storeConfig.db} is in use (${users.join(', ')}): stop the agent first, or --force`);
  for (const c of inSnapshot) await q!.collectionExists(c); // reachable now, or fail before anything changes

  const pending = readJournal(storeConfig.db);
  const plan = [
    ...(pending ? [`finish the interrupted restore from ${pending.from} first (journal ${journalPath(storeConfig.db)})`] : []),
    `take a pre-restore snapshot of ${storeName}`,
    ...manifest.qdrant.map((p) => `recover Qdrant collection ${p.collection} from ${p.file} (${manifest.files[p.file]!.bytes} bytes, ${p.points} points at ${p.startedAt})`),
    ...vectorFiles.map((p) => `replace ${p.source} with ${p.file} (${manifest.files[p.file]!.bytes} bytes at ${p.startedAt})`),
    `replace ${storeConfig.db} with ${manifest.sqlite.file} (${manifest.files[manifest.sqlite.file]!.bytes} bytes, ${manifest.sqlite.rows ?? '?'} rows at ${manifest.sqlite.startedAt})`,
  ];
  if (result.dryRun) {
    result.steps.push(...plan.map((s) => `would ${s}`));
    return result;
  }

  await withMaintenanceLock(storeConfig.db, 'restore', async () => {
    await clearLeftovers(config, storeName, opts.log, result.steps);
    const interrupted = readJournal(storeConfig.db);
    if (interrupted) {
      const endedAt = await finishRestore(config, storeName, interrupted, opts, result.steps);
      if (endedAt === from) {
        result.undo = interrupted.undo;
        return; // that was this very restore: it is done now
      }
    }
    const staged = stagingPath(storeConfig.db);
    const file = fileOwner(storeConfig.db);
    try {
      stageSqlite(join(from, manifest.sqlite.file), staged, manifest, config.busyTimeoutMs, file, opts.log);
      const check = await sha256File(join(from, manifest.sqlite.file));
      if (check.sha256 !== manifest.files[manifest.sqlite.file]!.sha256) throw storeError(`${from}: ${manifest.sqlite.file} changed while being restored`);
      result.steps.push(`staged the SQLite copy at ${staged} (integrity ok)`);

      result.undo = await undoSnapshot(config, storeName, opts, result);
      const journal: RestoreJournal = {
        format: JOURNAL_FORMAT, store: storeName, from, undo: result.undo, direction: 'forward', recovered: [], sqliteDone: false,
        file, pid: process.pid, startedAt: new Date(opts.now()).toISOString(),
      };
      writeJournal(storeConfig.db, journal);
      try {
        // mem0's SQLite vector files first, then the collections and the history (applySnapshot): a failure in
        // between leaves history as it was.
        for (const part of vectorFiles) {
          const stagedVectors = join(dirname(part.source), `.${basename(part.source)}.restore-${process.pid}`);
          stageSqlite(join(from, part.file), stagedVectors, { ...manifest, sqlite: part }, config.busyTimeoutMs, fileOwner(part.source), opts.log);
          replaceStoreFile(stagedVectors, part.source, config.busyTimeoutMs);
          result.steps.push(`replaced ${part.source}`);
        }
        await applySnapshot(config, storeName, journal, from, manifest, staged, opts, result.steps);
      } catch (err) {
        await rollBack(config, storeName, journal, err, opts);
        throw err;
      }
      removeJournal(storeConfig.db);
    } finally {
      rmSync(staged, { force: true });
    }
  });
  for (const c of inSnapshot) result.points[c] = await q!.count(c);
  opts.log.info({ store: storeName, from, undo: result.undo, points: result.points }, 'restore done');
  return result;
}

/** Copy the snapshot's SQLite file beside the store, give it the source's journal mode, check it. */
export function stageSqlite(source: string, staged: string, manifest: Manifest, busyTimeoutMs: number, file: FileOwner | null, log: Logger): void {
  rmSync(staged, { force: true });
  copyFileSync(source, staged);
  keepOwner(staged, file, log);
  const db = openDatabase(staged, { busyTimeoutMs });
  try {
    const integrity = (db.pragma('integrity_check') as { integrity_check: string }[]).map((r) => r.integrity_check).join('; ');
    if (integrity !== 'ok') throw storeError(`${source}: integrity_check of the staged copy says "${integrity.slice(0, 200)}"`);
    if (manifest.sqlite.journalMode === 'wal') db.pragma('journal_mode = WAL');
  } finally {
    db.close();
  }
  fsyncPath(staged);
}

/**
 * The pre-restore snapshot: what to restore to undo this restore, and what Qdrant is rolled back from if a
 * collection fails half-way. Without it (store file or a collection missing, say on a new machine) only --force
 * goes on.
 */
async function undoSnapshot(config: Config, storeName: string, opts: RestoreOptions, result: RestoreResult): Promise<string | null> {
  try {
    const snap = await takeSnapshot(config, storeName, { now: opts.now, log: opts.log, reason: 'pre-restore', storeLock: false });
    result.steps.push(`took the pre-restore snapshot ${snap.dir}`);
    return snap.dir;
  } catch (err) {
    if (!opts.force) {
      throw new WardenError((err as WardenError).kind ?? 'store', `could not take the pre-restore snapshot (${(err as Error).message}); nothing was changed; --force restores without one`, { cause: err });
    }
    opts.log.warn({ store: storeName, err: (err as Error).message }, 'restoring without a pre-restore snapshot (--force)');
    result.steps.push('no pre-restore snapshot (--force)');
    return null;
  }
}

/**
 * Atomically swap the staged file in. The old store is checkpointed and closed first so no -wal file of the old
 * database is left next to the new one (SQLite would replay it into the restored file).
 */
export function replaceStoreFile(staged: string, dbPath: string, busyTimeoutMs: number): void {
  let db: ReturnType<typeof openDatabase> | undefined;
  try {
    db = existsSync(dbPath) ? openDatabase(dbPath, { busyTimeoutMs }) : undefined;
  } catch {
    db = undefined; // not a readable SQLite store any more: nothing to checkpoint
  }
  if (db) {
    try {
      db.pragma('wal_checkpoint(TRUNCATE)');
    } finally {
      db.close();
    }
  }
  for (const side of ['-wal', '-shm', '-journal']) rmSync(dbPath + side, { force: true });
  renameSync(staged, dbPath);
  fsyncPath(dirname(dbPath));
}
