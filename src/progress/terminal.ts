import type { Progress, ProgressUnit } from './progress.js';

/** At most this many redraws a second: a prune ticks thousands of times, a terminal needs ten. */
const REDRAW_MS = 100;
/** Clear to the end of the line. */
const CLEAR = '\x1b[K';

export interface TerminalProgressOptions {
  /** Milliseconds, for the rate and time left (tests give their own). */
  now?: () => number;
}

/**
 * One line on the terminal, redrawn in place: `prune  12,400/50,000 rows  25%  8,100 rows/s  ~6s left`. The cursor
 * is left at the start of the line, so a log line written meanwhile overwrites it rather than running on after it;
 * the next redraw comes back below. `done()` blanks the line. Only text this module makes is written: labels are
 * fixed words from the code, never store text.
 */
export function terminalProgress(out: NodeJS.WritableStream, opts: TerminalProgressOptions = {}): Progress {
  const now = opts.now ?? (() => performance.now());
  let phase: { label: string; total: number | undefined; unit: ProgressUnit; done: number; started: number } | null = null;
  let drawnAt = -Infinity;
  let shown = false;

  const draw = (force: boolean) => {
    if (!phase) return;
    const t = now();
    if (!force && t - drawnAt < REDRAW_MS) return;
    drawnAt = t;
    out.write(`\r${CLEAR}${progressLine(phase, t - phase.started)}\r`);
    shown = true;
  };
  const clear = () => {
    if (shown) out.write(`\r${CLEAR}`);
    shown = false;
    phase = null;
  };
  return {
    start(label, total, unit) {
      clear();
      phase = { label, total, unit, done: 0, started: now() };
      if (total !== 0) draw(true); // nothing to do: nothing to show
    },
    tick(n = 1) {
      if (!phase) return;
      phase.done += n;
      draw(false);
    },
    set(done) {
      if (!phase) return;
      phase.done = done;
      draw(false);
    },
    done: clear,
  };
}

/** The text of the line: done of total, share, rate, time left (only what is known). */
export function progressLine(p: { label: string; total: number | undefined; unit: ProgressUnit; done: number }, elapsedMs: number): string {
  const amount = (n: number) => (p.unit === 'bytes' ? bytes(n) : n.toLocaleString('en-US'));
  const unit = p.unit === 'bytes' ? '' : ` ${p.unit}`; // 6.6 MB, not 6.6 MB bytes
  const parts = [p.label, p.total === undefined ? `${amount(p.done)}${unit}` : `${amount(p.done)}/${amount(p.total)}${unit}`];
  if (p.total !== undefined && p.total > 0) parts.push(`${Math.min(100, Math.floor((100 * p.done) / p.total))}%`);
  const rate = elapsedMs >= 500 ? (p.done * 1000) / elapsedMs : 0;
  if (rate > 0) {
    parts.push(p.unit === 'bytes' ? `${bytes(rate)}/s` : `${Math.round(rate).toLocaleString('en-US')} ${p.unit}/s`);
    if (p.total !== undefined && p.total > p.done) parts.push(`~${duration((p.total - p.done) / rate)} left`);
  }
  return parts.join('  ');
}

function bytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
}

function duration(seconds: number): string {
  const s = Math.ceil(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}
