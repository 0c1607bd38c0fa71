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

/**
 * SQLite codes that mean "someone else holds the lock right now", not "this store is broken". SQLITE_PROTOCOL is
 * SQLite giving up on the WAL index's shared-memory locks after its own retries (other processes' connections
 * opening and checkpointing on a loaded machine): the same question asked again succeeds.
 */
const TRANSIENT_SQLITE = new Set(['SQLITE_BUSY', 'SQLITE_LOCKED', 'SQLITE_BUSY_SNAPSHOT', 'SQLITE_BUSY_RECOVERY', 'SQLITE_PROTOCOL']);
const TRANSIENT_NET = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'EAI_AGAIN', 'ENOTFOUND', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT']);

/** Normalise anything thrown into a WardenError, classifying well-known transient causes. */
export function coerceError(err: unknown, doing?: string): WardenError {
  if (err instanceof WardenError) {
    // An error that already names what was being done ("digest: …" from the digest job) is not named twice.
    if (!doing || err.message.startsWith(`${doing}: `)) return err;
    return new WardenError(err.kind, `${doing}: ${err.message}`, { cause: err.cause ?? err });
  }
  const e = err as { code?: string; message?: string; cause?: { code?: string } } | undefined;
  const said = e?.message ?? String(err);
  const why = said === 'fetch failed' ? networkCause(err) : undefined;
  const message = why ? `${said} (${why})` : said;
  const code = e?.code ?? e?.cause?.code;
  const kind: ErrorKind =
    (code && (TRANSIENT_SQLITE.has(code) || TRANSIENT_NET.has(code))) || /database is locked|fetch failed/i.test(message)
      ? 'transient'
      : 'internal';
  return new WardenError(kind, doing ? `${doing}: ${message}` : message, { cause: err });
}

/**
 * Why a request got no answer, from what fetch (undici) throws: its `TypeError: fetch failed` keeps the reason in
 * `cause` (`connect ECONNREFUSED 127.0.0.1:6333`, `getaddrinfo ENOTFOUND qdrant`, a certificate error), at times an
 * AggregateError with one per address tried. Undefined when there is none to tell.
 */
export function networkCause(err: unknown): string | undefined {
  const said: string[] = [];
  const visit = (e: unknown, depth: number) => {
    if (!e || typeof e !== 'object' || depth > 5) return;
    const x = e as { message?: unknown; code?: unknown; cause?: unknown; errors?: unknown };
    if (Array.isArray(x.errors) && x.errors.length > 0) {
      for (const inner of x.errors) visit(inner, depth + 1);
      return;
    }
    if (x.cause) return visit(x.cause, depth + 1);
    const message = typeof x.message === 'string' && x.message !== '' ? x.message : typeof x.code === 'string' ? x.code : '';
    const code = typeof x.code === 'string' && !message.includes(x.code) ? `${x.code}: ` : '';
    if (message && !said.includes(`${code}${message}`)) said.push(`${code}${message}`);
  };
  visit((err as { cause?: unknown } | undefined)?.cause, 0);
  return said.length > 0 ? said.join('; ').split('\n')[0] : undefined;
}

export function isTransient(err: unknown): boolean {
  return coerceError(err).transient;
}
