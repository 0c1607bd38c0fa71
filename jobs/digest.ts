import { z } from '../src/vendor/zod.js';
import { defineJob, type JobContext } from '../src/job/job.js';
import { runDigest, type DigestResult } from '../src/digest/digest.js';
import { createDigestSectionsTask } from '../src/digest/sections-task.js';

/**
 * `{}`: every configured store. `stores`: only these. `store`: one store, what `run digest --store NAME` passes.
 * The selection is part of the recipient list's identity only when it is not every store, so `run digest` on a
 * one-store config and the scheduled `{}` are the same digest and cannot both be sent.
 */
export const payloadSchema = z.strictObject({
  stores: z.array(z.string().min(1)).min(1).optional(),
  store: z.string().min(1).optional(),
});
export type DigestPayload = z.infer<typeof payloadSchema>;

/** The daily digest email: one for all stores (or one per store), exactly once per day per recipient list. */
export async function digest(payload: DigestPayload, ctx: JobContext): Promise<DigestResult> {
  const stores = payload.stores ?? (payload.store ? [payload.store] : undefined);
  return runDigest(stores ? { stores } : {}, ctx);
}

export default defineJob({
  name: 'digest', writes: false, scope: 'global', engines: ['sqlite', 'postgres'], schema: payloadSchema, run: digest,
  // A fleet digest reads each store's section on the store's host: a task routed to that host's lane.
  tasks: (config) => [createDigestSectionsTask(config)],
  unready: async (config) => {
    const { checkSendConfig } = await import('../src/digest/send.js');
    try {
      checkSendConfig(config);
      return null;
    } catch (err) {
      return (err as Error).message;
    }
  },
});
