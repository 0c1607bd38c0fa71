import type { Layout } from './index.js';
import { mem0Prune } from './mem0.js';
import { mem0CheckReport } from './mem0-integrity.js';

/** mem0: prune the way mem0's own delete() does, integrity from history and points (docs/mem0-layout.md). */
export const mem0Layout: Layout = {
  name: 'mem0',
  prune: (store, ctx, opts) => mem0Prune(store, ctx, opts),
  check: (store, ctx) => mem0CheckReport(store, { now: ctx.now() }),
};
