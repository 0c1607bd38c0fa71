import { defineJob, type JobContext } from '../src/job/job.js';
import { storePayload } from '../src/job/payload.js';
import { openStore } from '../src/layouts/open.js';
import type { CheckReport } from '../src/layouts/contract.js';
import { layoutOf } from '../src/layouts/registry.js';
import { withPendingRestore } from '../src/snapshot/journal.js';
import { fileIdentity } from '../src/store/file-identity.js';

/** `{ store }`, checked without loading zod when it is plainly that (`check`'s start-up). */
export const payloadSchema = storePayload;
export type IntegrityPayload = { store: string };

/** The job form of `memory-warden check`: reads only, so it may overlap other jobs of the same store. */
export async function integrity(payload: IntegrityPayload, ctx: JobContext): Promise<CheckReport> {
  const store = openStore(ctx.config, payload.store);
  try {
    // Which file this checks, taken before: the digest shows this report only for that same file (collect.ts).
    const file = fileIdentity(store.path);
    // A restore killed half-way is reported first, and the orphans it makes up are not (src/snapshot/journal.ts).
    const report = withPendingRestore(await layoutOf(store).check(store, { ctx }), ctx.config.stores[payload.store]!.db);
    ctx.log.info({ ok: report.ok, rows: report.rows, live: report.live, problems: report.problems.length }, 'integrity done');
    return file === undefined ? report : { ...report, file };
  } finally {
    store.close();
  }
}

export default defineJob({ name: 'integrity', writes: false, schema: payloadSchema, run: integrity });
