/**
 * The longest wait a timer holds: Node's (setTimeout, setInterval, a socket's timeout) count milliseconds in a
 * signed 32-bit integer, about 24.8 days, and fire after 1 ms when given more; SQLite's busy_timeout is an int too,
 * and a longer one wraps around and turns the wait off. A duration that becomes one of them is refused past this
 * (in config: src/time/timer-duration.ts).
 */
export const TIMER_MAX_MS = 2 ** 31 - 1;

const UNIT_MS = { ms: 1, seconds: 1000 } as const;
export type TimerUnit = keyof typeof UNIT_MS;

/** The largest whole number of `unit` a timer holds. */
export const timerMax = (unit: TimerUnit): number => Math.floor(TIMER_MAX_MS / UNIT_MS[unit]);

/** Why a longer duration is refused, in one line. */
export const timerTooLong = (unit: TimerUnit): string => `at most ${timerMax(unit)} ${unit} (about 24.8 days), the longest wait a timer holds`;
