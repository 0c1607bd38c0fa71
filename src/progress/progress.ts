/**
 * How a long job says how far it has got. Jobs call it through their context (`ctx.progress`, or a `progress`
 * option) and never know where it goes: on a terminal the CLI hands them `terminalProgress`
 * (src/progress/terminal.ts); `--json`, a stderr that is not a terminal, and the worker get nothing at all.
 */
export type ProgressUnit = 'rows' | 'points' | 'bytes' | 'steps' | 'files';

export interface Progress {
  /** A new phase: `total` of `unit` to do (unknown: undefined). Ends whatever phase was shown before. */
  start(label: string, total: number | undefined, unit: ProgressUnit): void;
  /** `n` more done. */
  tick(n?: number): void;
  /** `done` of the total done so far. */
  set(done: number): void;
  /** The phase is over: whatever was shown is taken away. Safe to call twice, or with nothing started. */
  done(): void;
}

/** Reports nothing: the worker's, `--json`'s, and any caller's that gives none. */
export const noProgress: Progress = {
  start: () => undefined,
  tick: () => undefined,
  set: () => undefined,
  done: () => undefined,
};
