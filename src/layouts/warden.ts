import type { Layout } from './index.js';
import { checkStore } from '../check.js';
import { withConsistency } from '../store/consistency.js';
import { pruneWarden } from '../prune.js';

/** The memory table of the brief, with an optional Qdrant side. */
export const wardenLayout: Layout = {
  name: 'warden',
  prune: (store, ctx, opts) => pruneWarden(store, ctx, opts),
  async check(store, ctx) {
    const now = ctx.now();
    const sqlite = checkStore(store, {
      now,
      reviewAfterDays: ctx.config.review.afterDays,
      supersededAfterDays: ctx.config.prune.supersededAfterDays,
    });
    // With a Qdrant side: orphan points, rows without a point, payload text differing (streamed, page by page).
    return withConsistency(sqlite, store, { now, signal: ctx.signal });
  },
};
