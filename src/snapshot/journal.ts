import { existsSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { readRegularFile } from '../core/read-file.js';
import { dirname, join } from 'node:path';
import type { Config } from '../config/config.js';
import { storeFiles } from '../store/files.js';
import { storeError, usageError } from '../core/errors.js';
import { FILE_MODE, fsyncPath, storeSnapshotDir } from './layout.js';
import { finding, type Finding } from '../job/findings.js';
import { shellPath, storeFlags, type StoreNaming } from '../digest/untrusted.js';

export const JOURNAL_FORMAT = 'memory-warden-restore/1';

/**
 * What a restore in progress has changed, beside the store file (`<db>.warden-restore.json`). Written before the
 * first collection is recovered and after every step, removed once both stores are the snapshot's. A restore killed
 * half-way leaves it, and the next `restore`, worker start or `check` finds it: until it is finished, one store
 * holds the snapshot and the other does not, and the difference is not orphans to delete.
 */
export interface RestoreJournal {
  format: typeof JOURNAL_FORMAT;
  store: string;
  /** The snapshot folder being restored (verified before the journal was written). */
  from: string;
  /** The pre-restore snapshot of the state before: what a roll back goes to. */
  undo: string | null;
  /** forward: applying `from`; back: applying `undo` (the snapshot `from` could no longer be used). */
  direction: 'forward' | 'back';
  /** Collections already recovered from the snapshot this direction applies. */
  recovered: string[];
  /** The store file has been replaced by this direction's snapshot copy (back: or never was by the forward one). */
  sqliteDone: boolean;
  /** The store file's mode and owner before the restore: the restored file gets them back. */
  file: { mode: number; uid: number; gid: number } | null;
  pid: number;
  startedAt: string;
  /**
   * `skipped`: the restore was started without the erase ledger (--without-erase-ledger, src/erase/restore-ledger.ts),
   * so finishing it does not ask for one. Absent: finishing it re-applies the ledger as the restore did.
   */
  eraseLedger?: 'skipped';
  /** How the command that started the restore named the store (RestoreOptions.storeNaming), for finishCommand. */
  namedBy?: StoreNaming;
  /**
   * A store that is a database (set from the start, for it only): its tables' generation (EngineTables.generation)
   * before this direction's tables were restored (empty: not yet). One of them gone means that restore committed.
   */
  tablesBefore?: string[];
  /**
   * A store file with its vectors in a database's tables (Manifest.vectorTables): this direction's tables are
   * restored (they go before the file). Absent: the store has none, or they are not restored yet.
   */
  vectorTablesDone?: boolean;
}

export function journalPath(dbPath: string): string {
  return `${dbPath}.warden-restore.json`;
}

/**
 * What a store's restore journal is kept by (journalPath of it): the store file, beside which a SQLite store's
 * journal lies; a store with no file on any host (a database) keeps it among its snapshots on the host that restores
 * it (`<snapshot.root>/<store>/.restore.warden-restore.json`), where that host's next restore, worker start, check
 * and writers find it.
 */
export function restoreJournalBase(config: Config, storeName: string): string {
  const store = config.stores[storeName]!;
  return storeFiles(store).length > 0 ? store.db : join(storeSnapshotDir(config, storeName), '.restore');
}

/** The pending restore of this store, or null. A journal that cannot be read is a failure, never ignored. */
export function readJournal(dbPath: string): RestoreJournal | null {
  const path = journalPath(dbPath);
  if (!existsSync(path)) return null;
  let j: Partial<RestoreJournal>;
  try {
    // A regular file only: a FIFO put there held every command on the store for ever, a link to /dev/zero filled memory.
    j = JSON.parse(readRegularFile(path)) as Partial<RestoreJournal>;
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw storeError(`read restore journal ${path}: ${err instanceof SyntaxError ? err.message : why}; a restore of this store was interrupted: check the store by hand, then delete the file`, err);
  }
  if (j.format !== JOURNAL_FORMAT || typeof j.from !== 'string' || !Array.isArray(j.recovered)) {
    throw storeError(`read restore journal ${path}: not a memory-warden restore journal (format ${JSON.stringify(j.format)})`);
  }
  return j as RestoreJournal;
}

/** Atomically: a temporary file, fsynced, renamed over the journal, the folder fsynced. 0600. */
export function writeJournal(dbPath: string, journal: RestoreJournal): void {
  const path = journalPath(dbPath);
  const tmp = `${path}.tmp-${process.pid}`;
  rmSync(tmp, { force: true });
  writeFileSync(tmp, JSON.stringify(journal, null, 2) + '\n', { mode: FILE_MODE, flag: 'wx' });
  fsyncPath(tmp);
  renameSync(tmp, path);
  fsyncPath(dirname(path));
}

export function removeJournal(dbPath: string): void {
  rmSync(journalPath(dbPath), { force: true });
  fsyncPath(dirname(dbPath));
}

/** The command that finishes a pending restore, for messages. */
export function finishCommand(j: RestoreJournal): string {
  // Every path and name from the journal goes out as one shell word: the file is data, not a command.
  const namedBy = typeof j.namedBy === 'object' && j.namedBy !== null ? j.namedBy : {};
  return `memory-warden restore ${shellPath(j.from)} ${storeFlags(namedBy, String(j.store))}`;
}

/** One line for check, the worker and job refusals. */
export function pendingMessage(dbPath: string, j: RestoreJournal): string {
  return `a restore of store "${j.store}" from ${j.from} was interrupted (journal ${journalPath(dbPath)}, ${j.recovered.length} collection(s) done, ${j.tablesBefore !== undefined ? 'tables' : 'SQLite'} ${j.sqliteDone ? 'done' : 'not yet'}): ` +
    `${j.tablesBefore !== undefined ? 'the tables' : 'SQLite'} and Qdrant may hold different snapshots; run \`${finishCommand(j)}\` (or start the worker) to finish it; do not repair orphans meanwhile`;
}

/** Writers (prune, drift, snapshot, erase) stay off a store whose restore was interrupted: it is half one snapshot. */
export function assertNoPendingRestore(dbPath: string): void {
  const j = readJournal(dbPath);
  if (j) throw usageError(pendingMessage(dbPath, j));
}

/**
 * Findings that compare the store with its vectors elsewhere (Qdrant, a Mastra store's PgVector on another server):
 * meaningless while a restore is half done, and their advice harmful.
 */
const CROSS_STORE = new Set([
  'orphan_points', 'missing_points', 'payload_mismatch', 'unmapped_points', 'unmappable_rows',
  'mem0_resurrected', 'mem0_lost_vector', 'mem0_no_history', 'mem0_hash_mismatch', 'mem0_dangling_entity_link',
  'mastra_embedding_without_message', 'mastra_embedding_without_thread',
]);

/**
 * A check report with the store's interrupted restore first among its problems, and the cross-store findings it
 * makes up (orphans to delete, vectors lost) withheld: the cure is finishing the restore, never repair orphans.
 * `dbPath`: what the store's journal is kept by (restoreJournalBase).
 */
export function withPendingRestore<R extends { ok: boolean; problems: Finding[]; notes: Finding[] }>(report: R, dbPath: string): R & { restorePending?: RestoreJournal } {
  const j = readJournal(dbPath);
  if (!j) return report;
  const withheld = [...report.problems, ...report.notes].filter((f) => CROSS_STORE.has(f.code)).map((f) => f.code);
  const pending = finding('restore_pending', 'error', pendingMessage(dbPath, j) + (withheld.length > 0 ? ` (withheld until then: ${withheld.join(', ')})` : ''));
  const problems = [pending, ...report.problems.filter((f) => !CROSS_STORE.has(f.code))];
  return { ...report, ok: false, problems, notes: report.notes.filter((f) => !CROSS_STORE.has(f.code)), restorePending: j };
}
