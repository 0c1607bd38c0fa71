import { pino, type Logger } from 'pino';

export type { Logger };

/** Paths pino blanks in every line: secrets must never reach a log, whatever object carries them. */
export const REDACT_PATHS = [
  'password', '*.password', '*.*.password', 'pass', '*.pass', '*.*.pass',
  'apiKey', '*.apiKey', '*.*.apiKey', 'api_key', '*.api_key',
  'token', '*.token', 'authorization', '*.authorization', '*.headers.authorization', '*.*.headers.authorization',
  'smtp.password', 'qdrant.apiKey', '*.qdrant.apiKey',
];

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
  const level = opts.level ?? process.env.LOG_LEVEL ?? 'info';
  const redact = { paths: REDACT_PATHS, censor: '[redacted]' };
  if (opts.destination) return pino({ level, redact }, opts.destination as pino.DestinationStream);
  const pretty = opts.pretty ?? (process.stderr.isTTY === true);
  if (pretty) {
    return pino({
      level,
      redact,
      transport: { target: 'pino-pretty', options: { destination: 2, colorize: true, ignore: 'pid,hostname' } },
    });
  }
  return pino({ level, redact }, pino.destination(2));
}

/** A logger that discards everything, for library callers and tests that do not care. */
export const silentLogger: Logger = pino({ level: 'silent' });
