import { z } from '../src/vendor/zod.js';
import { defineJob, type JobContext } from '../src/job/job.js';
import { erase, type EraseReceipt, type EraseSelector } from '../src/erase/erase.js';

/**
 * `erase` on the store's host: what `memory-warden erase` sends when the store lives on another machine
 * (src/queue/remote.ts). Exactly one selector; the payload leaves Redis once its receipt is read.
 */
export const payloadSchema = z
  .strictObject({
    store: z.string().min(1),
    user: z.string().optional(),
    subject: z.string().optional(),
    ids: z.array(z.string()).min(1).optional(),
    dryRun: z.boolean().default(false),
    snapshots: z.boolean().default(false),
    vectorsLost: z.boolean().default(false),
  })
  .refine((p) => [p.user, p.subject, p.ids].filter((v) => v !== undefined).length === 1, { message: 'exactly one of user, subject, ids' });
export type ErasePayload = z.infer<typeof payloadSchema>;

export async function eraseJob(p: ErasePayload, ctx: JobContext): Promise<EraseReceipt> {
  const sel: EraseSelector = p.user !== undefined ? { user: p.user } : p.subject !== undefined ? { subject: p.subject } : { ids: p.ids! };
  return erase(ctx.config, p.store, sel, { dryRun: p.dryRun, snapshots: p.snapshots, vectorsLost: p.vectorsLost, now: ctx.now, log: ctx.log });
}

export default defineJob({ name: 'erase', writes: true, engines: ['sqlite', 'postgres'], schema: payloadSchema, run: eraseJob });
