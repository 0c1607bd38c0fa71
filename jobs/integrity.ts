import { z } from 'zod';
import { defineJob, type JobContext } from '../src/job.js';
import { openStore } from '../src/layouts/open.js';
import type { CheckReport } from '../src/layouts/contract.js';
import { layoutOf } from '../src/layouts/registry.js';
import { withPendingRestore } from '../src/snapshot/journal.js';

export const payloadSchema = z.strictObject({ store: z.string().min(1) });
export type IntegrityPayload = z.infer<typeof payloadSchema>;

/** The job form of `memory-warden check`: reads only, so it may overlap other jobs of the same store. */
export async function integrity(payload: IntegrityPayload, ctx: JobContext): Promise<CheckReport> {
  const store = openStore(ctx.config, payload.store);
  try {
    // A restore killed half-way is reported first, and the orphans it makes up are not (src/snapshot/journal.ts).
    const report = withPendingRestore(await layoutOf(store).check(store, { ctx }), ctx.config.stores[payload.store]!.db);
    ctx.log.info({ ok: report.ok, rows: report.rows, live: report.live, problems: report.problems.length }, 'integrity done');
    return report;
  } finally {
    store.close();
  }
}

export default defineJob({ name: 'integrity', writes: false, schema: payloadSchema, run: integrity });
