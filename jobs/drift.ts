import { storePayload } from '../src/job/payload.js';
import { defineJob, type JobContext } from '../src/job/job.js';
import { expandHome } from '../src/config/config.js';
import { openStoreOnEngine, withStoreLock } from '../src/layouts/open.js';
import { openStateDb } from '../src/state/state.js';
import { toCanonical } from '../src/time/instants.js';
import { redactDecision, verifyAll } from '../src/drift/dispatch.js';
import type { Applied } from '../src/layouts/contract.js';
import { acceptedReading, madeByDrift, pendingMemoryIds, verdictLog } from '../src/drift/record.js';
import { prepareVerification } from '../src/drift/setup.js';
import { createVerifyTask, verifyThroughTasks } from '../src/drift/task.js';
import { jobsOf } from '../src/layouts/registry.js';

export const payloadSchema = storePayload;
export type DriftPayload = { store: string };

export interface DriftResult {
  store: string;
  now: string;
  /** Rows taken from the review queue this run (at most review.batch). */
  due: number;
  confirmed: number;
  contradicted: number;
  superseded: number;
  changed: number;
  unverifiable: number;
  refused: number;
  /** Items this run added to the human queue. */
  toPerson: number;
  /** Source reads made, and reads shared between memories of this run. */
  reads: number;
  sharedReads: number;
  verdicts: Applied[];
}

/**
 * The weekly drift re-verification of one store: take the review queue (oldest first, at most review.batch,
 * rows already waiting for a person left out), re-check each row against its source through the verifier its
 * rule names, and write the verdicts. Holds the store's maintenance lock for the whole run. Under the worker the
 * reads go out as `verify` tasks (src/drift/task.ts), which take no lock; picking the rows and writing the verdicts
 * stay here, so each verdict is applied once, by this job. A mem0 store is reviewed the same way
 * (src/layouts/mem0/drift.ts), without automatic supersedes.
 */
export async function drift(payload: DriftPayload, ctx: JobContext): Promise<DriftResult> {
  const now = ctx.now();
  const result: DriftResult = {
    store: payload.store, now: toCanonical(now), due: 0, confirmed: 0, contradicted: 0, superseded: 0, changed: 0,
    unverifiable: 0, refused: 0, toPerson: 0, reads: 0, sharedReads: 0, verdicts: [],
  };
  const verification = await prepareVerification(ctx.config);
  const store = await openStoreOnEngine(ctx.config, payload.store);
  const state = openStateDb(expandHome(ctx.config.stateDb));
  try {
    const layout = await jobsOf(store);
    await withStoreLock(store, 'drift', async () => {
      const { afterDays, batch } = ctx.config.review;
      const exclude = pendingMemoryIds(state, payload.store);
      const { batch: queue } = await layout.reviewDue(store, { now, afterDays, limit: batch, exclude });
      result.due = queue.length;
      if (queue.length === 0) return;
      const options = {
        ...verification,
        log: ctx.log,
        now,
        signal: ctx.signal,
        accepted: (id: string, verifier: string) => acceptedReading(state, payload.store, id, verifier),
        madeByDrift: (id: string) => madeByDrift(state, payload.store, id),
      };
      // Under the worker each source read is its own task (a BullMQ job); under `run drift` they run here.
      const run = ctx.dispatch ? await verifyThroughTasks(queue, options, ctx.dispatch, payload.store) : await verifyAll(queue, options);
      if (ctx.signal.aborted) ctx.log.warn({ verified: run.decisions.length, due: queue.length }, 'drift interrupted; the rest stays due for the next run');
      result.reads = run.reads;
      result.sharedReads = run.sharedReads;
      for (const decision of run.decisions) {
        // The one place verdicts are written: nothing from the environment reaches the store, the state db or the output.
        const applied = await layout.applyDrift(store, { decision: redactDecision(decision), now, log: verdictLog(state) });
        result[applied.verdict] += 1;
        if (applied.supersededBy) result.superseded += 1;
        if (applied.needsPerson) result.toPerson += 1;
        result.verdicts.push(applied);
      }
    });
  } finally {
    state.close();
    await store.close();
  }
  const { due, confirmed, contradicted, superseded, changed, unverifiable, refused, toPerson, reads, sharedReads } = result;
  ctx.log.info({ due, confirmed, contradicted, superseded, changed, unverifiable, refused, toPerson, reads, sharedReads }, 'drift done');
  return result;
}

export default defineJob({
  name: 'drift', writes: true, scope: 'store', engines: ['sqlite', 'postgres'], schema: payloadSchema, run: drift,
  // Under the worker each source read is a `verify` task on its own queue, verify.concurrency at a time.
  tasks: (config) => [createVerifyTask(config)],
  // A broken verifier plugin or rule is a start-up error naming the file, not a failure at the first drift run.
  async prepare(config) {
    if (config.verify.rules.length > 0 || config.verify.plugins.length > 0) await prepareVerification(config);
  },
});
