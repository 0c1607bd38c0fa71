import type { StoreConfig } from '../store/config.js';
import type { Db } from '../store/sqlite.js';
import type { RowVectors } from '../vectors/contract.js';
import type { PgSession } from './postgres/session.js';
import type { EngineName } from './postgres/config.js';
import type { ByteFinding, Unseen } from './postgres/bytes.js';

export type { EngineName } from './postgres/config.js';

/**
 * The store-engine plug point: what a store is and how it is kept, apart from what its tables mean (that is the
 * layout's, src/layouts/contract.ts). An engine says where a store lives (a file on one host, or a database every
 * host reaches), how it is opened, how one maintenance writer at a time is assured, and what the database's own
 * integrity check says. One folder per engine (src/engines/<name>/), an explicit registry (registry.ts), one contract
 * suite (test/engines/contract.test.ts). Layouts name the engines they run on in src/layouts/registry.ts.
 */
export interface StoreEngine<H extends AnyStoreHandle = AnyStoreHandle> {
  name: EngineName;
  /**
   * `host`: the store is files on one machine (its `host:`), so its jobs run on that machine; `fleet`: a database
   * reachable from every host, so a job of it runs once across the fleet, whichever worker takes it, the database
   * itself deciding (`lock`).
   */
  reach: 'host' | 'fleet';
  /** How messages name the store: its file, or `postgres schema NAME`. */
  describe(store: StoreConfig): string;
  /** The store's connection (the layout then checks its tables: src/layouts/open.ts). */
  open(name: string, store: StoreConfig, opts: OpenOnEngine): Promise<H>;
  /**
   * One maintenance writer per store at a time, across every process that can reach it: a lock that the holder's
   * death releases, however it dies (kill -9 included). Refused at once, transiently, when another holds it.
   */
  lock(handle: H, holder: string): Promise<EngineLock>;
  /** The database's own integrity check of the store's tables and indexes (SQLite's, PostgreSQL's amcheck). */
  integrity(handle: H): Promise<EngineIntegrity>;
  /**
   * `reach: 'fleet'` engines: claim one scheduled run of a job on the store, once across every host, in the database
   * itself. A run finished 'ok' (by any host) comes back as such; one another live process holds comes back as in
   * progress; otherwise the run is claimed and held until `end`, and the holder's death (kill -9 included) lets it go
   * at once, unfinished, so the queue's retry on any worker claims it again. Host engines have none: their host's
   * state db is the record (src/state/state.ts claimScheduledRun).
   */
  claimScheduledRun?(name: string, store: StoreConfig, run: ScheduledRunRef): Promise<FleetRunClaim>;
  /**
   * Before a job reads the store for a person (the digest) or writes a person's decision into it (review): the store
   * can be read, or a store error saying why, one line. SQLite: quick_check of the file. PostgreSQL: what open proved
   * (the server answered, the layout found its tables); the server reports a damaged page when it is read.
   */
  assertReadable(handle: H): Promise<void>;
  /**
   * Which store the handle reaches, as a string equal only for the same store: a report of it (the integrity job's)
   * is matched by this, never by the store's name. SQLite: the file's identity (src/store/file-identity.ts);
   * PostgreSQL: the cluster, the database and the schema, by oid (a schema dropped and made again is another store).
   * Undefined when it cannot be told (a report is then never matched).
   */
  identity(handle: H): Promise<string | undefined>;
  /**
   * The store as one artifact of its tables at one instant, and back: what a snapshot holds of a store that is a
   * database rather than a file: src/snapshot/create.ts puts it in a snapshot folder's `tables/`, where it is
   * verified, encrypted and pushed like any file, and src/snapshot/restore-tables.ts puts it back. Absent on an engine whose store is a file on its host: a snapshot
   * copies that file (src/snapshot/sqlite-copy.ts). The snapshot feature asks whether the engine has it, never the
   * engine's name.
   */
  tables?: EngineTables<H>;
  /**
   * Erase's last step on the store, once the layout's deletes have committed: leave no byte of the deleted rows where
   * the engine can reach, and say what was verified and what it cannot see. SQLite: VACUUM, then the WAL checkpointed
   * and truncated (secure_delete zeroed the freed pages as the rows went). PostgreSQL: VACUUM FULL of `tables`, then
   * their relation files read back through the server for `needles` (src/engines/postgres/bytes.ts).
   */
  scrubErased(handle: H, opts: ScrubOptions): Promise<EngineScrub>;
}

export interface ScrubOptions {
  /** The tables the erase deleted from (a database engine's; a SQLite file is compacted whole). */
  tables: readonly string[];
  /** The erased texts, fields and ids no remaining row holds: none of them may be left in what is read back. */
  needles: readonly string[];
  /**
   * Called once the rewrite has been asked of the server (PostgreSQL: the first VACUUM FULL sent), so that the caller's
   * own work runs while the server rewrites, instead of holding back the request; not called when nothing is rewritten.
   */
  rewriting?: () => void;
}

export interface EngineScrub {
  /** The freed space rewritten: SQLite's VACUUM, PostgreSQL's VACUUM FULL of every table. */
  vacuumed: boolean;
  /**
   * SQLite: the WAL emptied and truncated (false: a reader held it). PostgreSQL: always false, the WAL is the
   * server's (listed in `bytes.unseen`).
   */
  walTruncated: boolean;
  /** An engine that reads its files back: what it read, found, and cannot see. */
  bytes?: ByteCheck;
}

/** What the read-back of the store's files found (never a needle: findings name its index). */
export interface ByteCheck {
  /** clean: every file read, no needle found; found: some remains; unverified: something could not be read. */
  verdict: 'clean' | 'found' | 'unverified';
  /** How many needles were looked for. */
  needles: number;
  /** Relations (files) read, and their bytes. */
  relations: number;
  bytes: number;
  found: ByteFinding[];
  /**
   * Needles found only where rows still in the store hold the same text (another memory with the same words): not
   * the erased rows' own bytes, so not findings; counted here.
   */
  shared: number;
  /** What no file the engine reads shows (the WAL, replicas, dumps by others…), each with how an operator reaches it. */
  unseen: Unseen[];
}

/** What an engine's table artifact is and holds (EngineTables). */
export interface TablesTaken {
  /** The artifact's format, recorded in the snapshot's manifest. */
  format: string;
  /** Where its tables were read from, as messages name a store (`postgres schema NAME`). */
  source: string;
  /** The one instant every table was read at, as the database saw it (ISO 8601). */
  takenAt: string;
  /** Rows per table. */
  tables: Record<string, number>;
  /** Every file of the artifact, relative to its folder. */
  files: string[];
}

/** A layout's tables apart from its store (a layout's vectorTables), taken as the engine's table artifact (EngineTables) takes its own. */
export interface SideTables {
  /** How messages name them (`postgres schema public: memories, memories_entities`). */
  describe: string;
  /** Reads the tables that exist into `folder` (which exists and is empty) at one instant. */
  take(folder: string): Promise<TablesTaken>;
  /** The artifact in `folder`, every file checked against its own record. */
  verify(folder: string): Promise<TablesTaken>;
  /** Puts the artifact's tables in place of the configured ones (only those), all or nothing. */
  restore(folder: string): Promise<TablesTaken>;
}

/**
 * One table's rows handed over while a snapshot reads them into its artifact: the named columns' values as text (null:
 * NULL, or no such column), row by row, from the bytes the artifact's file is made of.
 */
export interface TableRowsWatch {
  table: string;
  columns: readonly string[];
  row(values: (string | null)[]): void;
  /**
   * In place of `row`, where the engine has them: each row's named columns as the bytes of the artifact's text, the
   * k-th column `buf[from[k]..to[k])` (`from[k]` -1: no such column), valid only during the call; `text` gives such
   * bytes' value as `row` would have it. Bytes that are all printable ASCII (0x20 to 0x7e) but the backslash are the
   * value itself, as UTF-8 (COPY's text format escapes nothing else), so a watch needs no string of them.
   */
  fields?(buf: Buffer, from: Int32Array, to: Int32Array, text: (buf: Buffer, from: number, to: number) => string | null): void;
}

export interface EngineTables<H> {
  /**
   * Reads every table of the store into `folder` (which exists and is empty) at one instant; agents keep writing.
   * `rows`: one table's rows handed over as they are read (what a snapshot makes of them needs no second read).
   */
  take(handle: H, folder: string, opts?: { rows?: TableRowsWatch }): Promise<TablesTaken>;
  /**
   * The artifact in `folder`, every file checked against its own record; throws a store error naming the file.
   * `digests`: each file's size and sha256 as this check read them (where the engine gives them).
   */
  verify(folder: string): Promise<TablesTaken & { digests?: Record<string, { bytes: number; sha256: string }> }>;
  /** One table's rows in the artifact, the named columns' values as text (null: NULL), read as they are iterated. */
  values(folder: string, table: string, columns: readonly string[]): Iterable<(string | null)[]>;
  /**
   * Puts the artifact's tables in place of the store's, in the store's configured place only (never where the artifact
   * was read from), all or nothing, kill -9 included. `beforeSwap` is handed the restored tables (a handle on them,
   * before they go live) and stops the restore by throwing: the store is then left as it was.
   */
  restore(handle: H, folder: string, opts?: { beforeSwap?: (restored: H) => Promise<void> }): Promise<TablesTaken>;
  /**
   * The identities of the store's tables now (PostgreSQL: their oids). `restore` replaces every one of them, so one
   * that is gone proves a restore committed since: a restore journal records them before its tables go in, and a
   * restore killed after the commit is not done again when it is finished (src/snapshot/restore-tables.ts).
   */
  generation(handle: H): Promise<string[]>;
}

/** The scheduled run claimed: its id (`<scheduler>:<millis>`, src/queue/schedules.ts scheduledRunOf), its job, who runs it. */
export interface ScheduledRunRef {
  scheduledRun: string;
  job: string;
  host: string;
  pid: number;
}

/** What a fleet claim found: the run done, in progress elsewhere, or claimed by this process until `end`. */
export type FleetRunClaim =
  | { alreadyRan: { runId: number; finishedAt: string; host: string } }
  | { inProgress: { host: string | null; pid: number | null } }
  | { claimed: { runId: number; end(outcome: 'ok' | 'failed'): Promise<void> } };

export interface OpenOnEngine {
  readonly?: boolean;
  busyTimeoutMs?: number;
}

export interface EngineLock {
  release(): Promise<void> | void;
}

export interface EngineIntegrity {
  /** `ok`, or what the check found, one line. */
  result: string;
  /** What the check could not do and why (amcheck not installable), for a note: never silently skipped. */
  skipped?: string;
}

/** A store in one SQLite file on this host (src/store/): the handle every SQLite layout works on. */
export interface SqliteStoreHandle {
  engine?: 'sqlite';
  name: string;
  config: StoreConfig;
  path: string;
  db: Db;
  vectors?: RowVectors;
  close(): void;
}

/** A store in a schema of a PostgreSQL database (src/engines/postgres/). */
export interface PostgresStoreHandle {
  engine: 'postgres';
  name: string;
  config: StoreConfig;
  /** How messages and reports name it: `postgres schema NAME`. */
  path: string;
  /** The quoted schema name, for SQL. */
  schema: string;
  pg: PgSession;
  vectors?: RowVectors;
  close(): Promise<void>;
}

export type AnyStoreHandle = SqliteStoreHandle | PostgresStoreHandle;
