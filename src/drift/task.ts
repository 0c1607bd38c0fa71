import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { redactSecrets } from '../text/secrets.js';
import { judge } from '../verifiers/rules.js';
import { z } from '../vendor/zod.js';
import type { Config } from '../config/config.js';
import { coerceError, configError, transientError, usageError } from '../core/errors.js';
import type { TaskDispatch } from '../job/job.js';
import type { TaskContext, TaskKind } from '../queue/tasks.js';
import { ReadCache, realRoots } from '../verifiers/context.js';
import { isNoReading, type Allowlists, type MemoryUnderReview, type VerifierResult } from '../verifiers/types.js';
import { decide, planVerification, readSource, STOPPED, type Decision, type DispatchOptions, type DispatchResult, type Planned } from './dispatch.js';
import { prepareVerification, type Verification } from './setup.js';

/**
 * Drift under the worker: each memory a verifier can check is read by its own `verify` task (a BullMQ job on the
 * worker's task queue, src/queue/tasks.ts). Only the read crosses the queue: the drift job plans every memory
 * (rule, refusals, parameters), sends the reads out, judges what comes back with the same `decide` as inline, and
 * applies the verdicts itself, once, under its store lock. A task reads sources and nothing else: it opens no
 * store and takes no lock, and its payload holds no parameters (they may carry secrets from the environment): the
 * task fills them in again from its own copy of the rule.
 */
export const VERIFY_TASK = 'verify';

/** Checked on entry: a task outlives the code that queued it, and Redis is not where trust comes from. */
export const verifyTaskSchema = z.strictObject({
  v: z.literal(1),
  /** One drift run (and the reads its tasks share on a worker). */
  run: z.string().min(1).max(64),
  store: z.string().min(1),
  /** The rule's index in verify.rules, and the verifier it names there. */
  rule: z.number().int().nonnegative(),
  verifier: z.string().min(1),
  /** The drift job's clock, so a task sees the same "now" as the run (`--now`, tests). */
  now: z.number().int(),
  /** The row as its verifier sees it (VerifyTask.memory): nothing else of the store. */
  memory: z.strictObject({ id: z.string().min(1), subject: z.string(), fact: z.string(), source: z.string(), confirmed_at: z.string() }),
});
export type VerifyTaskPayload = z.infer<typeof verifyTaskSchema>;

/** What a `verify` task returns: the verifier's result (fingerprint taken before it crossed Redis) and its reads. */
export interface VerifyTaskResult {
  result: VerifierResult;
  /** Set when the value read carried a value from the environment: it crosses Redis redacted, judged here. */
  expectHeld?: boolean;
  reads: number;
  sharedReads: number;
}

const taskResultSchema = z.object({
  result: z.union([
    z.object({ verdict: z.enum(['unverifiable', 'refused']), reason: z.string(), evidence: z.record(z.string(), z.unknown()).optional() }),
    z.object({
      value: z.unknown(),
      fingerprint: z.string().optional(),
      evidence: z.record(z.string(), z.unknown()).optional(),
      verdict: z.enum(['confirmed', 'contradicted']).optional(),
    }),
  ]),
  expectHeld: z.boolean().optional(),
  reads: z.number().int().nonnegative(),
  sharedReads: z.number().int().nonnegative(),
});

/**
 * The worker's verifyAll: plan here, read through `verify` tasks, judge here. A task that failed for good (after
 * its retries) is `unverifiable`, tried again next run; one the stop cut short is no verdict and is not recorded.
 */
export async function verifyThroughTasks(memories: readonly MemoryUnderReview[], opts: DispatchOptions, dispatch: TaskDispatch, store: string): Promise<DispatchResult> {
  if (opts.signal.aborted) return { decisions: [], reads: 0, sharedReads: 0 };
  const planned = memories.map((m) => planVerification(m, opts.rules, opts.registry));
  const plans = planned.flatMap((p) => ('plan' in p ? [p.plan] : []));
  const run = randomUUID();
  const payloads: VerifyTaskPayload[] = plans.map(({ memory: m, rule }) => ({
    v: 1, run, store, rule: rule.index, verifier: rule.use, now: opts.now,
    memory: { id: m.id, subject: m.subject, fact: m.fact, source: m.source, confirmed_at: m.confirmed_at },
  }));
  const outcomes = plans.length > 0 ? await dispatch.runTasks(VERIFY_TASK, payloads, { signal: opts.signal }) : [];
  const judged = new Map<Planned, Decision | undefined>();
  let reads = 0;
  let sharedReads = 0;
  plans.forEach((plan, i) => {
    const outcome = outcomes[i] ?? { ok: false as const, error: 'no outcome', stopped: true };
    const failed = (reason: string): Decision => ({ memory: plan.memory, verdict: 'unverifiable', verifier: plan.rule.use, rule: plan.rule.name, evidence: { reason }, fingerprint: null, needsPerson: false });
    if (!outcome.ok) {
      judged.set(plan, outcome.stopped ? undefined : failed(`verification task failed: ${outcome.error.split('\n')[0]}`));
      return;
    }
    const parsed = taskResultSchema.safeParse(outcome.value);
    if (!parsed.success) {
      judged.set(plan, failed('verification task returned something that is not a verifier result'));
      return;
    }
    reads += parsed.data.reads;
    sharedReads += parsed.data.sharedReads;
    const result = parsed.data.result as VerifierResult;
    const stopped = isNoReading(result) && result.reason === STOPPED;
    judged.set(plan, stopped ? undefined : decide(plan.memory, plan.rule, plan.vars, result, opts, parsed.data.expectHeld));
  });
  const decisions = planned.map((p) => ('decision' in p ? p.decision : judged.get(p.plan)));
  return { decisions: decisions.filter((d): d is Decision => d !== undefined), reads, sharedReads };
}

/**
 * What a task returns goes through Redis: a value read that carries a value from the environment (an endpoint
 * echoing its URL) is sent redacted, with the rule's expect judged here on the value as read. The fingerprint was
 * taken before (readSource); reasons and evidence are redacted there.
 */
function crossingRedis(result: VerifierResult, plan: Planned): Pick<VerifyTaskResult, 'result' | 'expectHeld'> {
  if (isNoReading(result)) return { result };
  const value = redactSecrets(result.value);
  if (isDeepStrictEqual(value, result.value)) return { result };
  const held = !result.verdict && plan.rule.expect ? { expectHeld: judge(plan.rule.expect, result.value, plan.vars) } : {};
  return { result: { ...result, value }, ...held };
}

/** One run's shared reads on this worker: what ReadCache is inline, per drift run and attempt. */
interface RunReads {
  cache: ReadCache;
  allow: Allowlists;
  usedAt: number;
}

const IDLE_MS = 10 * 60_000;
const MAX_RUNS = 64;

/** A ReadCache for one task over its run's shared one, counting whether its reads were made or shared. */
class TaskReads extends ReadCache {
  constructor(private readonly run: ReadCache) {
    super();
  }
  override once<T>(key: string, read: () => Promise<T>): Promise<T> {
    const before = this.run.reads;
    const p = this.run.once(key, read);
    if (this.run.reads > before) this.reads += 1;
    else this.shared += 1;
    return p;
  }
}

/**
 * The `verify` task kind the worker runs: check the payload, find the rule by index in this worker's config (it must
 * name the same verifier and match the row, else the configs differ: a permanent failure), fill in the parameters,
 * read the source within the rule's timeout. A read that failed transiently (network, a locked file) is thrown so
 * BullMQ retries it with backoff; on the last attempt it is returned as `unverifiable`, as inline.
 */
export function createVerifyTask(config: Config): TaskKind {
  let prepared: Promise<Verification> | undefined;
  const runs = new Map<string, RunReads>();
  const readsFor = (key: string, v: Verification): RunReads => {
    const now = Date.now();
    for (const [k, r] of runs) if (now - r.usedAt > IDLE_MS) runs.delete(k);
    let r = runs.get(key);
    if (!r) {
      if (runs.size >= MAX_RUNS) runs.delete(runs.keys().next().value!);
      r = { cache: new ReadCache(), allow: { ...v.allow, fileRoots: realRoots(v.allow.fileRoots) }, usedAt: now };
      runs.set(key, r);
    }
    r.usedAt = now;
    return r;
  };
  return {
    name: VERIFY_TASK,
    concurrency: config.verify.concurrency,
    async run(payload: unknown, ctx: TaskContext): Promise<VerifyTaskResult> {
      const checked = verifyTaskSchema.safeParse(payload);
      if (!checked.success) {
        const issue = checked.error.issues[0]!;
        throw usageError(`verify task payload: ${issue.path.map(String).join('.') || '(root)'}: ${issue.message}`);
      }
      const task = checked.data;
      const v = await (prepared ??= prepareVerification(config).catch((err: unknown) => {
        prepared = undefined;
        throw err;
      }));
      const rule = v.rules[task.rule];
      if (!rule || rule.use !== task.verifier) {
        throw configError(`verify task: rule ${task.rule} of this worker's verify.rules does not use "${task.verifier}"; workers sharing a queue need the same config`);
      }
      const planned = planVerification(task.memory, [rule], v.registry);
      if ('decision' in planned) {
        const d = planned.decision;
        if (d.rule === null) throw configError(`verify task: rule ${task.rule} of this worker's verify.rules does not match memory ${task.memory.id}; workers sharing a queue need the same config`);
        // Refused, or parameters the verifier rejects: what the collect step says too; nothing is read.
        const reason = typeof d.evidence.reason === 'string' ? d.evidence.reason : d.verdict;
        return { result: { verdict: d.verdict === 'refused' ? 'refused' : 'unverifiable', reason }, reads: 0, sharedReads: 0 };
      }
      const run = readsFor(`${task.run}#${ctx.attempt}`, v);
      const cache = new TaskReads(run.cache);
      const reading = await readSource(planned.plan, {
        cache, allow: run.allow, configuredRoots: v.allow.fileRoots, cacheDir: v.cacheDir, timeoutMs: v.timeoutMs, log: ctx.log.child({ store: task.store }), now: task.now, signal: ctx.signal,
      });
      const what = `verify ${task.memory.id} (${rule.name})`;
      if (ctx.signal.aborted) throw transientError(`${what}: the worker is stopping; tried again`);
      if (reading.thrown !== undefined && !ctx.lastAttempt && coerceError(reading.thrown).transient) {
        throw transientError(`${what}: ${isNoReading(reading.result) ? reading.result.reason : 'read failed'}`, reading.thrown);
      }
      return { ...crossingRedis(reading.result, planned.plan), reads: cache.reads, sharedReads: cache.shared };
    },
  };
}
