import { pino, type Logger } from 'pino';
import { hasSecrets, redactText } from './secrets.js';

export type { Logger };

/** Paths pino blanks in every line: secrets must never reach a log, whatever object carries them. */
export const REDACT_PATHS = [
  'password', '*.password', '*.*.password', 'pass', '*.pass', '*.*.pass',
  'apiKey', '*.apiKey', '*.*.apiKey', 'api_key', '*.api_key',
  'token', '*.token', 'authorization', '*.authorization', '*.headers.authorization', '*.*.headers.authorization',
  'smtp.password', 'qdrant.apiKey', '*.qdrant.apiKey',
  // Whole configs and connection options (the worker's redis/smtp/stores sections), and other secret-named keys.
  '*.*.*.password', 'stores.*.qdrant.apiKey', '*.stores.*.qdrant.apiKey', 'secret', '*.secret', 'requirepass',
  'cookie', '*.headers.cookie', '*.*.headers.cookie',
];

const URL_CREDENTIALS = /(\b[a-z][a-z0-9+.-]*:\/\/)([^\s:@/]*):([^\s@/]+)@/gi;

/**
 * Passwords inside URLs (`redis://:secret@host`) are not at a fixed path, so every string logged (message, fields,
 * error messages and stacks) has them blanked: `redis://:[redacted]@host`; values from the environment become
 * `${NAME}` (src/secrets.ts).
 */
export function scrubUrlCredentials<T>(value: T, depth = 0, seen = new WeakSet<object>()): T {
  if (typeof value === 'string') return redactText(value.replace(URL_CREDENTIALS, '$1$2:[redacted]@')) as T;
  if (!value || typeof value !== 'object' || depth > 5 || seen.has(value)) return value;
  seen.add(value);
  if (Array.isArray(value)) return value.map((v) => scrubUrlCredentials(v, depth + 1, seen)) as T;
  const copy = Object.create(Object.getPrototypeOf(value)) as Record<string, unknown>;
  for (const key of Object.getOwnPropertyNames(value)) copy[key] = scrubUrlCredentials((value as Record<string, unknown>)[key], depth + 1, seen);
  return copy as T;
}

const hooks = {
  logMethod(this: Logger, args: unknown[], method: (...a: unknown[]) => void) {
    return method.apply(this, args.map((a) => scrubUrlCredentials(a)));
  },
};

/** Every line as written, redacted once more: bindings of child loggers and serializers do not pass the hooks. */
function redactingStream(dest: NodeJS.WritableStream | pino.DestinationStream): pino.DestinationStream {
  const d = dest as pino.DestinationStream & { flush?: (cb?: (err?: Error) => void) => void; flushSync?: () => void };
  return {
    write: (line: string) => d.write(hasSecrets() ? redactText(line) : line),
    flush: (cb?: (err?: Error) => void) => (d.flush ? d.flush(cb) : cb?.()),
    flushSync: () => d.flushSync?.(),
  } as pino.DestinationStream;
}

export interface LoggerOptions {
  level?: string;
  pretty?: boolean;
  destination?: NodeJS.WritableStream;
}

/**
 * JSON lines by default (what log shippers read); human-readable when stdout is a terminal or --pretty.
 * Logs go to stderr so that stdout stays the command's result (`--json`).
 */
export function createLogger(opts: LoggerOptions = {}): Logger {
  const level = opts.level ?? (process.env.LOG_LEVEL || 'info'); // an empty variable is an unset one
  const redact = { paths: REDACT_PATHS, censor: '[redacted]' };
  if (opts.destination) return pino({ level, redact, hooks }, redactingStream(opts.destination));
  const pretty = opts.pretty ?? (process.stderr.isTTY === true);
  if (pretty) {
    return pino({
      level,
      redact,
      hooks,
      transport: { target: 'pino-pretty', options: { destination: 2, colorize: true, ignore: 'pid,hostname' } },
    });
  }
  return pino({ level, redact, hooks }, redactingStream(pino.destination(2)));
}

/** A logger that discards everything, for library callers and tests that do not care. */
export const silentLogger: Logger = pino({ level: 'silent' });
