import { z } from '../vendor/zod.js';
import { timerMax, timerTooLong, type TimerUnit } from './timer-limit.js';

/** A number of `unit` in config that becomes a timer: refused past what a timer holds (src/time/timer-limit.ts). */
export const timerDuration = (unit: TimerUnit): z.ZodNumber => z.number().max(timerMax(unit), timerTooLong(unit));
