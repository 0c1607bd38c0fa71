import { createHash } from 'node:crypto';

// The deterministic embedder of the Mastra tests: the SDK's mock embedder (test/helpers/mastra-sdk.ts) and the
// fixture that writes Mastra's tables directly (test/layouts/mastra-fixture.ts) give a text the same vector.

export const DIM = 16;

/** Bag of words hashed into DIM dimensions: equal texts, equal vectors. */
export function embed(text: string): number[] {
  const v = new Array<number>(DIM).fill(0);
  for (const w of text.toLowerCase().split(/\W+/).filter(Boolean)) v[createHash('sha1').update(w).digest()[0]! % DIM]! += 1;
  v[DIM - 1]! += 0.01;
  const n = Math.hypot(...v);
  return v.map((x) => x / n);
}
