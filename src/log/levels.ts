/** The log levels pino knows, as config's `log.level`, `--log-level` and LOG_LEVEL take them. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

export type LogLevel = (typeof LOG_LEVELS)[number];
