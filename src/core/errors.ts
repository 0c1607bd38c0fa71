/**
 * One error type for the whole project. Every failure says what was being done and whether a retry can help:
 * `transient` failures (Redis, Qdrant, SMTP, network, `database is locked`) are retried by the worker,
 * everything else (bad config, missing store, wrong schema) is permanent and is not.
 */
export type ErrorKind = 'usage' | 'config' | 'store' | 'transient' | 'internal';

// Every failure to run is exit 2 for the CLI (1 is reserved for "ran, and found problems").
const EXIT_CODES: Record<ErrorKind, number> = { usage: 2, config: 2, store: 2, transient: 2, internal: 2 };

export class WardenError extends Error {
  readonly kind: ErrorKind;
  constructor(kind: ErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'WardenError';
    this.kind = kind;
  }
  get transient(): boolean {
    return this.kind === 'transient';
  }
  get exitCode(): number {
    return EXIT_CODES[this.kind];
  }
}

export const usageError = (message: string) => new WardenError('usage', message);
export const configError = (message: string) => new WardenError('config', message);
export const storeError = (message: string, cause?: unknown) => new WardenError('store', message, { cause });
export const transientError = (message: string, cause?: unknown) => new WardenError('transient', message, { cause });

/** SQLite codes that mean "someone else holds the lock right now", not "this store is broken". */
const TRANSIENT_SQLITE = new Set(['SQLITE_BUSY', 'SQLITE_LOCKED', 'SQLITE_BUSY_SNAPSHOT', 'SQLITE_BUSY_RECOVERY']);
const TRANSIENT_NET = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'EAI_AGAIN', 'ENOTFOUND', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT']);

/** Normalise anything thrown into a WardenError, classifying well-known transient causes. */
export function coerceError(err: unknown, doing?: string): WardenError {
  if (err instanceof WardenError) {
    return doing ? new WardenError(err.kind, `${doing}: ${err.message}`, { cause: err.cause ?? err }) : err;
  }
  const e = err as { code?: string; message?: string; cause?: { code?: string } } | undefined;
  const message = e?.message ?? String(err);
  const code = e?.code ?? e?.cause?.code;
  const kind: ErrorKind =
    (code && (TRANSIENT_SQLITE.has(code) || TRANSIENT_NET.has(code))) || /database is locked|fetch failed/i.test(message)
      ? 'transient'
      : 'internal';
  return new WardenError(kind, doing ? `${doing}: ${message}` : message, { cause: err });
}

export function isTransient(err: unknown): boolean {
  return coerceError(err).transient;
}
