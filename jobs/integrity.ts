import { defineJob, type JobContext } from '../src/job/job.js';
import { storePayload } from '../src/job/payload.js';
import { openStoreOnEngine } from '../src/layouts/open.js';
import type { CheckReport } from '../src/layouts/contract.js';
import { jobsOf } from '../src/layouts/registry.js';
import { restoreJournalBase, withPendingRestore } from '../src/snapshot/journal.js';
import { engineFor } from '../src/engines/registry.js';

/** `{ store }`, checked without loading zod when it is plainly that (`check`'s start-up). */
export const payloadSchema = storePayload;
export type IntegrityPayload = { store: string };

/** The job form of `memory-warden check`: reads only, so it may overlap other jobs of the same store. */
export async function integrity(payload: IntegrityPayload, ctx: JobContext): Promise<CheckReport> {
  const store = await openStoreOnEngine(ctx.config, payload.store);
  try {
    const engine = await engineFor(store.config);
    // Which store this checks, taken before: the digest shows this report only for that same store (collect.ts).
    const file = await engine.identity(store);
    // A restore killed half-way is reported first, and the orphans it makes up are not (src/snapshot/journal.ts).
    const report = logged(ctx, withPendingRestore(await (await jobsOf(store)).check(store, { ctx }), restoreJournalBase(ctx.config, payload.store)));
    return file === undefined ? report : { ...report, file };
  } finally {
    await store.close();
  }
}

function logged<R extends CheckReport>(ctx: JobContext, report: R): R {
  ctx.log.info({ ok: report.ok, rows: report.rows, live: report.live, problems: report.problems.length }, 'integrity done');
  return report;
}

export default defineJob({ name: 'integrity', writes: false, engines: ['sqlite', 'postgres'], schema: payloadSchema, run: integrity });
