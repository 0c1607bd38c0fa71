import { readFileSync } from 'node:fs';
import pg from 'pg';
import { configError, storeError, transientError, type WardenError } from '../../core/errors.js';
import type { PostgresConfig } from './config.js';

/**
 * The connections of one PostgreSQL store: a small pool on the configured URL (TLS verified against `caFile` when one is
 * given). Every failure to reach or use the database becomes one line naming the setting a person fixes
 * (`stores.fleet.postgres.url`), never the URL itself: it carries the password.
 */
export interface PgSession {
  /** A connection of its own (a transaction, a lock held across statements); release it. */
  connect(): Promise<pg.PoolClient>;
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>>;
  /** What a failure on this store means, as one line naming the setting (see pgError). */
  explain(err: unknown, doing: string): WardenError;
  end(): Promise<void>;
  /**
   * Its connections are inside a transaction of someone else's (a restore's): each BEGIN, COMMIT or ROLLBACK sent as a
   * statement of its own becomes a savepoint's, so a transaction must be sent statement by statement, never as one
   * query holding its COMMIT.
   */
  nested?: true;
}

/**
 * `setting`: the config path a failure names (default `stores.NAME.postgres`); `exitOnIdle`: idle connections do not
 * keep the process alive and close after a second (a pool no one ends: a mem0 store's pgvector tables).
 */
export function openPgSession(storeName: string, cfg: Pick<PostgresConfig, 'url' | 'caFile'> & Partial<PostgresConfig>, opts: { max?: number; setting?: string; exitOnIdle?: boolean } = {}): PgSession {
  const setting = opts.setting ?? `stores.${storeName}.postgres`;
  let ssl: pg.ConnectionConfig['ssl'];
  if (cfg.caFile !== undefined) {
    try {
      ssl = { ca: readFileSync(cfg.caFile, 'utf8'), rejectUnauthorized: true };
    } catch (err) {
      throw configError(`${setting}.caFile: cannot read ${cfg.caFile} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  }
  const pool = new pg.Pool({ connectionString: cfg.url, ...(ssl ? { ssl } : {}), max: opts.max ?? 4, application_name: 'memory-warden', connectionTimeoutMillis: 10_000,
    ...(opts.exitOnIdle ? { allowExitOnIdle: true, idleTimeoutMillis: 1000 } : {}) });
  // An idle connection the server drops (a restart, a terminated backend) must not crash the process.
  pool.on('error', () => {});
  const explain = (err: unknown, doing: string) => pgError(err, setting, doing);
  return {
    async connect() {
      try {
        return await pool.connect();
      } catch (err) {
        throw explain(err, 'connect');
      }
    },
    async query(sql, params) {
      try {
        return await pool.query(sql, params as unknown[]);
      } catch (err) {
        throw explain(err, 'query');
      }
    },
    explain,
    end: () => pool.end(),
  };
}

const UNREACHABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ENOTFOUND', 'EPIPE']);
/** SQLSTATEs a retry can help with: lock timeout, deadlock, serialization, too many connections, shutting down. */
const TRANSIENT_STATES = new Set(['55P03', '40P01', '40001', '53300', '57P01', '57P02', '57P03']);

/** The SQLSTATE of a PostgreSQL error, or undefined. */
export const sqlState = (err: unknown): string | undefined => (err as { code?: unknown })?.code as string | undefined;

/**
 * One line for a failure on a PostgreSQL store, naming the setting: the URL for credentials, a missing database or an
 * unreachable server; `caFile` for a certificate the server's does not match. Never the URL's text.
 */
export function pgError(err: unknown, setting: string, doing: string): WardenError {
  if ((err as { kind?: string }).kind) return err as WardenError;
  const code = sqlState(err);
  const message = String((err as Error)?.message ?? err).split('\n')[0]!;
  if (code === '28P01' || code === '28000') return configError(`${setting}.url: the server refused the credentials (${message})`);
  if (code === '3D000') return configError(`${setting}.url: ${message}`);
  if (code && TRANSIENT_STATES.has(code)) return transientError(`${setting}: ${doing}: ${message} (try again later)`, err);
  if (code && UNREACHABLE.has(code)) return transientError(`${setting}.url: cannot reach the server (${code})`, err);
  if (/certificate|self[- ]signed|SSL|TLS/i.test(message) && !code?.match(/^[0-9A-Z]{5}$/)) return configError(`${setting}.caFile: TLS: ${message}`);
  if (/timeout exceeded when trying to connect|Connection terminated/i.test(message)) return transientError(`${setting}.url: cannot reach the server (${message})`, err);
  return storeError(`${setting}: ${doing}: ${message}`, err);
}

/** A PostgreSQL identifier, quoted (the schema name is checked by the config to be a plain one anyway). */
export const quoteIdent = (name: string): string => `"${name.replace(/"/g, '""')}"`;
