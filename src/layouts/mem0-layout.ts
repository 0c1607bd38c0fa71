import type { Layout } from './index.js';
import { mem0Prune, mem0ReviewDue } from './mem0.js';
import { applyMem0Decision, mem0Queue } from '../drift/mem0.js';
import { mem0CheckReport } from './mem0-integrity.js';
import { mem0NewRows } from './mem0-digest.js';
import { detectDialect } from './mem0-history.js';
import { entityCollectionOf, mem0Schema } from './mem0-config.js';
import { eraseMem0 } from '../erase.js';
import { deletionRecorder } from '../erase-ledger.js';
import { confirmMem0 } from '../drift/review.js';

/** mem0: every job the way mem0's own code would do it (docs/mem0-layout.md). */
export const mem0Layout: Layout = {
  name: 'mem0',
  assertSchema: (db, store) => void detectDialect(db, store.db, store.mem0?.historyTable ?? 'auto'),
  collections(store) {
    const mem0 = mem0Schema.parse(store.mem0 ?? {});
    return [...new Set([...(store.qdrant?.collections ?? []), mem0.collection, entityCollectionOf(mem0)])];
  },
  // Each memory the prune deletes is recorded with a keyed hash of its user, so erase --user still finds it.
  prune: (store, ctx, opts) => mem0Prune(store, ctx, { ...opts, beforeDelete: deletionRecorder(ctx.config, store.name) }),
  check: (store, ctx) => mem0CheckReport(store, { now: ctx.now() }),
  newRows: (store, period, maxRows, rules) => mem0NewRows(store, period, maxRows, rules),
  async reviewDue(store, opts) {
    const { due } = await mem0ReviewDue(store, opts.now, opts.afterDays, 0);
    return { due, batch: await mem0Queue(store, opts.now, opts.afterDays, opts.limit ?? Number.MAX_SAFE_INTEGER, opts.exclude ?? []) };
  },
  applyDrift: (store, state, decision, now) => applyMem0Decision(store, state, decision, now),
  confirm: (store, state, id, now, record) => confirmMem0(store, state, id, now, record),
  // mem0's point payloads are read by the queue only: there the evidence carries the text as it was verified.
  currentMemory: () => null,
  corrections: false,
  erase: (store, sel, dryRun, opts) => eraseMem0(store, sel, dryRun, opts),
};
