import { storePayload } from '../src/job/payload.js';
import { defineJob, type JobContext } from '../src/job/job.js';
import { takeSnapshot, type SnapshotResult } from '../src/snapshot/create.js';
import { replicateStore, type TargetRun } from '../src/snapshot/targets/replicate.js';

export const payloadSchema = storePayload;
export type SnapshotPayload = { store: string };

/**
 * One coordinated SQLite + Qdrant snapshot of a store into one dated folder, then retention. It writes nothing to
 * the store, but it is scheduled as a writer (`writes: true`) on purpose: a prune running between the SQLite copy
 * and the Qdrant snapshot would put a row in one and not its vector in the other, which a restore would bring back
 * as an orphan. It also holds the store's maintenance lock while it runs.
 */
export async function snapshot(payload: SnapshotPayload, ctx: JobContext): Promise<SnapshotResult & { targets: TargetRun[] }> {
  const result = await takeSnapshot(ctx.config, payload.store, { now: ctx.now, log: ctx.log, signal: ctx.signal, progress: ctx.progress });
  // Then off the machine: every configured target gets what it lacks. A target that fails fails the job (transient
  // when a retry can help); the local snapshot stays, and the retry uploads whatever is still missing.
  const targets = await replicateStore(ctx.config, payload.store, { now: ctx.now, log: ctx.log, signal: ctx.signal });
  return { ...result, targets };
}

export default defineJob({ name: 'snapshot', writes: true, engines: ['sqlite', 'postgres'], schema: payloadSchema, run: snapshot });
