import { z } from '../src/vendor/zod.js';
import { defineJob, type JobContext } from '../src/job/job.js';
import { restoreSnapshot, type RestoreResult } from '../src/snapshot/restore.js';

/** `restore DIR` on the store's host, where DIR is (src/queue/remote.ts): what the command sends from elsewhere. */
export const payloadSchema = z.strictObject({
  store: z.string().min(1),
  dir: z.string().min(1),
  force: z.boolean().default(false),
  dryRun: z.boolean().default(false),
  /** restore --without-erase-ledger (src/erase/restore-ledger.ts). */
  withoutEraseLedger: z.boolean().default(false),
});
export type RestorePayload = z.infer<typeof payloadSchema>;

export async function restoreJob(p: RestorePayload, ctx: JobContext): Promise<RestoreResult> {
  return restoreSnapshot(ctx.config, p.store, p.dir, { now: ctx.now, log: ctx.log, force: p.force, dryRun: p.dryRun, withoutEraseLedger: p.withoutEraseLedger });
}

export default defineJob({ name: 'restore', writes: true, engines: ['sqlite', 'postgres'], schema: payloadSchema, run: restoreJob });
