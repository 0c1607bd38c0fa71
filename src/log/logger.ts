import { createRequire } from 'node:module';
import { pino, type Logger } from 'pino';
import { hasSecrets, redactText } from '../text/secrets.js';
import { escapedLine, jsonEscaped } from '../text/untrusted.js';

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

// The password runs to the last `@` of the authority, as URL parsers (and so ioredis) read it: `redis://:Pw@Zq7@host`.
const URL_CREDENTIALS = /(\b[a-z][a-z0-9+.-]*:\/\/)([^\s:@/?#]*):([^\s/?#]+)@/gi;

/**
 * Passwords inside URLs (`redis://:secret@host`) are not at a fixed path, so every string logged (message, fields,
 * error messages and stacks) has them blanked: `redis://:[redacted]@host`; values from the environment become
 * `${NAME}` (src/text/secrets.ts).
 */
export function scrubUrlCredentials<T>(value: T, depth = 0, seen = new WeakSet<object>()): T {
  // Values from the environment first: a password that holds `@` is whole there, and cut in two by the pattern.
  if (typeof value === 'string') return redactText(value).replace(URL_CREDENTIALS, '$1$2:[redacted]@') as T;
  if (!value || typeof value !== 'object' || depth > 5 || seen.has(value)) return value;
  seen.add(value);
  if (Array.isArray(value)) return value.map((v) => scrubUrlCredentials(v, depth + 1, seen)) as T;
  const copy = Object.create(Object.getPrototypeOf(value)) as Record<string, unknown>;
  for (const key of Object.getOwnPropertyNames(value)) copy[key] = scrubUrlCredentials((value as Record<string, unknown>)[key], depth + 1, seen);
  return copy as T;
}

const hooks = {
  logMethod(this: Logger, args: unknown[], method: (...a: unknown[]) => void) {
    return method.apply(this, args.map((a, i) => scrubUrlCredentials(i === 0 ? withoutBound(this, a) : a)));
  },
};

/**
 * A call's fields without those a child logger already binds to the same value (the job runner binds `store`, and
 * the code it runs names the store too): pino would write the key twice in one JSON object.
 */
function withoutBound(log: Logger, fields: unknown): unknown {
  if (!fields || typeof fields !== 'object' || Array.isArray(fields) || fields instanceof Error) return fields;
  const bound = log.bindings() as Record<string, unknown>;
  const keys = Object.keys(fields).filter((k) => k in bound && Object.is(bound[k], (fields as Record<string, unknown>)[k]));
  if (keys.length === 0) return fields;
  const copy = { ...(fields as Record<string, unknown>) };
  for (const k of keys) delete copy[k];
  return copy;
}

/**
 * Every line as written: redacted once more (bindings of child loggers and serializers do not pass the hooks),
 * then made safe for a terminal, since log lines are read in one (`tail -f`, journalctl, a command's stderr).
 * JSON.stringify leaves C1 controls, DEL, bidi controls and U+2028/2029 raw inside strings; they become `\uXXXX`
 * escapes (jsonEscaped), and the line still parses back to the exact values. A pretty line is made from that.
 */
function logStream(dest: NodeJS.WritableStream | pino.DestinationStream, pretty?: (line: string) => string): pino.DestinationStream {
  const d = dest as pino.DestinationStream & { flush?: (cb?: (err?: Error) => void) => void; flushSync?: () => void };
  return {
    write: (line: string) => {
      const json = jsonEscaped(hasSecrets() ? redactText(line) : line);
      d.write(pretty ? pretty(json) : json);
    },
    flush: (cb?: (err?: Error) => void) => (d.flush ? d.flush(cb) : cb?.()),
    flushSync: () => d.flushSync?.(),
  } as pino.DestinationStream;
}

/**
 * pino-pretty, in this process, over a line whose every string (keys too) is first shown as on one line of the
 * CLI's output (escapedLine): pino-pretty strips C0 and C1 controls from the message but keeps its newlines and bidi
 * controls, and prints field values as JSON, which leaves C1 and bidi controls raw. Loaded only for a pretty
 * logger: no command's start-up pays for it.
 */
function prettyLines(colorize: boolean): (line: string) => string {
  const { prettyFactory } = createRequire(import.meta.url)('pino-pretty') as typeof import('pino-pretty');
  const prettify = prettyFactory({ colorize, ignore: 'pid,hostname' });
  return (line) => prettify(shown(JSON.parse(line)));
}

/** A parsed log line with every string in it, and every key, shown on one line with its hidden characters named. */
function shown(value: unknown): unknown {
  if (typeof value === 'string') return escapedLine(value);
  if (Array.isArray(value)) return value.map(shown);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [escapedLine(k), shown(v)]));
  return value;
}

export interface LoggerOptions {
  level?: string;
  /** Human-readable lines (pino-pretty) instead of JSON lines; default: when stderr is a terminal. */
  pretty?: boolean;
  /** Where lines go instead of stderr (tests); JSON lines unless `pretty` is given. */
  destination?: NodeJS.WritableStream;
}

/**
 * JSON lines by default (what log shippers read); human-readable when stderr is a terminal or --pretty.
 * Logs go to stderr so that stdout stays the command's result (`--json`).
 */
export function createLogger(opts: LoggerOptions = {}): Logger {
  const level = opts.level ?? (process.env.LOG_LEVEL || 'info'); // an empty variable is an unset one
  const redact = { paths: REDACT_PATHS, censor: '[redacted]' };
  const pretty = opts.pretty ?? (opts.destination === undefined && process.stderr.isTTY === true);
  // Colours only on stderr, as before; a test's destination gets plain text.
  const format = pretty ? prettyLines(opts.destination === undefined) : undefined;
  return pino({ level, redact, hooks }, logStream(opts.destination ?? pino.destination(2), format));
}

/** A logger that discards everything, for library callers and tests that do not care. */
export const silentLogger: Logger = pino({ level: 'silent' });
