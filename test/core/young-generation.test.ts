/**
 * An erase holds V8's young generation at the size an erase of 10,000 memories reaches (src/core/young-generation.ts):
 * under a hold, allocation whose objects survive a few scavenges (what made the space double during a long erase)
 * no longer grows it past NEW_SPACE_CAP; released, it grows again as V8 likes. Fails without the hold: the space
 * doubles to 32 MiB (Node 20) or more (Node 22+).
 */
import { describe, expect, it } from 'vitest';
import { holdYoungGeneration, NEW_SPACE_CAP, newSpaceBytes, pollYoungGeneration } from '../../src/core/young-generation.js';

/** Objects kept for a few scavenges each, `rounds` times 1,000 arrays of 128 numbers, the hold polled between. */
function survivors(rounds: number): number {
  let kept: object[] = [];
  let most = 0;
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < 1_000; i++) kept.push(new Array(128).fill(i));
    if (kept.length > 4_000) kept = kept.slice(2_000);
    pollYoungGeneration();
    most = Math.max(most, newSpaceBytes());
  }
  return most;
}

describe('young generation', () => {
  it('stays at the cap while held, and grows again once released', () => {
    expect(newSpaceBytes()).toBeLessThan(NEW_SPACE_CAP); // a fresh process: V8 starts it smaller
    const release = holdYoungGeneration();
    try {
      expect(survivors(300)).toBeLessThanOrEqual(NEW_SPACE_CAP);
    } finally {
      release();
    }
    expect(survivors(300)).toBeGreaterThan(NEW_SPACE_CAP);
  });
});
