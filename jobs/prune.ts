import { z } from '../src/vendor/zod.js';
import { defineJob, type JobContext } from '../src/job/job.js';
import { openStoreOnEngine } from '../src/layouts/open.js';
import { jobsOf } from '../src/layouts/registry.js';
import type { PruneResult } from '../src/layouts/contract.js';
import { deletionRecorder } from '../src/erase/ledger.js';

export type { PruneResult } from '../src/layouts/contract.js';

export const payloadSchema = z.strictObject({
  store: z.string().min(1),
  dryRun: z.boolean().default(false),
});
export type PrunePayload = z.infer<typeof payloadSchema>;

/**
 * Delete what decays: rows expired at `now`, and superseded rows created more than `supersededAfterDays` before
 * it, with the older versions behind them, through both stores. The layout knows how (src/layouts/).
 */
export async function prune(payload: PrunePayload, ctx: JobContext): Promise<PruneResult> {
  const store = await openStoreOnEngine(ctx.config, payload.store);
  try {
    const result = await (await jobsOf(store)).prune(store, { ctx, dryRun: payload.dryRun, beforeDelete: deletionRecorder(ctx.config, store.name) });
    const { deleted, expired, superseded, cascaded, dryRun } = result;
    ctx.log.info({ deleted, expired, superseded, cascaded, dryRun }, 'prune done');
    return result;
  } finally {
    await store.close();
  }
}

export default defineJob({ name: 'prune', writes: true, engines: ['sqlite', 'postgres'], schema: payloadSchema, run: prune });
