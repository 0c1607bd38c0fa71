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
