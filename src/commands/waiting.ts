/**
 * What a command that waits shares: the --timeout it waits at most, and Ctrl-C (or SIGTERM) as a signal, so it can
 * say what it leaves behind instead of dying without a word.
 */
import { usageError } from '../core/errors.js';
import { timerMax, timerTooLong } from '../time/timer-limit.js';

/** `--timeout <seconds>`: a positive number of seconds a timer can hold; a usage error naming the option otherwise. */
export function timeoutSeconds(text: string): number {
  const seconds = Number(text);
  if (!Number.isFinite(seconds) || seconds <= 0) throw usageError(`--timeout: "${text}" is not a positive number of seconds`);
  if (seconds > timerMax('seconds')) throw usageError(`--timeout: ${timerTooLong('seconds')}`);
  return seconds;
}

/** Aborted by the first Ctrl-C or SIGTERM; a second one ends the process as usual. */
export function interruptSignal(): AbortSignal {
  const controller = new AbortController();
  const stop = () => controller.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  return controller.signal;
}
