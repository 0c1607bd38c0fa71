import v8 from 'node:v8';

/**
 * V8's young generation held at a size during a long job that takes memory in proportion to its work (an erase of
 * many memories): V8 doubles its semi-spaces whenever as many bytes as they hold have survived its scavenges since the
 * last doubling, a sum that only grows the longer a job allocates, up to 16 MiB each on Node 20 (32 MiB of new space)
 * and up to 64 MiB each on Node 22+ (128 MiB), the more the more memory the machine has. An erase of 10,000 memories
 * never gets there; one of 123,000 did, and its peak grew by that step (16 MiB on Node 20, up to 96 on Node 24).
 *
 * The semi-spaces' largest size is fixed when the process starts (`--max-semi-space-size`, which a program cannot
 * pass to its own process); how much each growth multiplies them by is read at every growth
 * (`--semi-space-growth-factor`, 2). Once the new space is `NEW_SPACE_CAP` or more, that factor is set to 1 (a growth
 * then keeps the size), and set back to 2 when the job ends. Nothing else changes: V8 still collects when the space is
 * full and may still shrink it. A process started with either flag of its own is left as it was.
 */

/** The new space (two semi-spaces) an erase of 10,000 memories reaches on Node 20: what an erase may hold. */
export const NEW_SPACE_CAP = 16 * 1024 * 1024;
const GROWTH_FACTOR = 2; // V8's default (Node 20 to 24)

const ownFlags = () => /semi[-_]space/.test(`${process.execArgv.join(' ')} ${process.env.NODE_OPTIONS ?? ''}`);

export const newSpaceBytes = (): number => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')?.space_size ?? 0;

let holders = 0;
let held = false;

/**
 * Holds the young generation at NEW_SPACE_CAP (once it gets there) until the returned function is called;
 * pollYoungGeneration looks again. Holds nest: the last release lets it grow again.
 */
export function holdYoungGeneration(): () => void {
  if (ownFlags()) return () => {};
  holders += 1;
  pollYoungGeneration();
  let released = false;
  return () => {
    if (released) return;
    released = true;
    holders -= 1;
    if (holders === 0 && held) {
      v8.setFlagsFromString(`--semi-space-growth-factor=${GROWTH_FACTOR}`);
      held = false;
    }
  };
}

/**
 * While a hold is on: stops the young generation's growth once it has reached NEW_SPACE_CAP. Cheap (V8's space
 * statistics); called between a job's steps and every few thousand rows of a long loop, so that the space grows
 * at most once past the cap between two calls.
 */
export function pollYoungGeneration(): void {
  if (holders === 0 || held || newSpaceBytes() < NEW_SPACE_CAP) return;
  v8.setFlagsFromString('--semi-space-growth-factor=1');
  held = true;
}
