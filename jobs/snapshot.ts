import { z } from 'zod';
import { defineJob, type JobContext } from '../src/job.js';
import { takeSnapshot, type SnapshotResult } from '../src/snapshot/create.js';

export const payloadSchema = z.strictObject({ store: z.string().min(1) });
export type SnapshotPayload = z.infer<typeof payloadSchema>;

/**
 * One coordinated SQLite + Qdrant snapshot of a store into one dated folder, then retention. It writes nothing to
 * the store, but it is scheduled as a writer (`writes: true`) on purpose: a prune running between the SQLite copy
 * and the Qdrant snapshot would put a row in one and not its vector in the other, which a restore would bring back
 * as an orphan. It also holds the store's maintenance lock while it runs.
 */
export async function snapshot(payload: SnapshotPayload, ctx: JobContext): Promise<SnapshotResult> {
  return takeSnapshot(ctx.config, payload.store, { now: ctx.now, log: ctx.log, signal: ctx.signal, progress: ctx.progress });
}

export default defineJob({ name: 'snapshot', writes: true, schema: payloadSchema, run: snapshot });
