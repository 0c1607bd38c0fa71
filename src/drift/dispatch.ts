import { createHash } from 'node:crypto';
import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import type { Instant } from '../time/instants.js';
import { createVerifierContext, ReadCache, realRoots } from '../verifiers/context.js';
import { fill, fillTree, judge, matchRule, type CompiledRule, type Template } from '../verifiers/rules.js';
import type { VerifierRegistry } from '../verifiers/registry.js';
import { Refusal, isNoReading, type Allowlists, type MemoryUnderReview, type Verifier, type VerifierResult } from '../verifiers/types.js';
import type { VerdictRow } from './record.js';
import { redactSecrets, redactText } from '../text/secrets.js';

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');

// What one memory's verification came to: the layout contract's Decision (a layout applies it).
export type { Decision } from '../layouts/contract.js';
import type { Decision } from '../layouts/contract.js';

export interface DispatchOptions {
  rules: readonly CompiledRule[];
  registry: VerifierRegistry;
  concurrency: number;
  timeoutMs: number;
  allow: Allowlists;
  cacheDir: string;
  log: Logger;
  now: Instant;
  signal: AbortSignal;
  /** The last accepted reading of a memory by a verifier (state db), for "changed". */
  accepted: (memoryId: string, verifier: string) => VerdictRow | undefined;
  /** Was this row written by drift as a replacement (state db)? Without it, only a `drift:` source prefix tells. */
  madeByDrift?: (memoryId: string) => boolean;
}

export interface DispatchResult {
  decisions: Decision[];
  /** Source reads actually made, and reads answered by another memory's read in the same run. */
  reads: number;
  sharedReads: number;
}

export const fingerprintOf = (value: unknown) => 'sha256:' + createHash('sha256').update(stableJson(value)).digest('hex');

function stableJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableJson).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${stableJson((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

class Timeout extends Error {}

/** The reason a verification cut short by the job's stop carries: not a verdict about the source, never recorded. */
export const STOPPED = 'the run was stopped';

/** A verifier's result, and the error behind it when it threw (a task retries the transient ones). */
export interface Reading {
  result: VerifierResult;
  thrown?: unknown;
}

/** Run one verifier with its own deadline. A verifier that ignores its signal still loses the race. */
export async function runWithTimeout(
  verifier: Verifier<any>,
  task: Parameters<Verifier<any>['verify']>[0],
  ctxFor: (signal: AbortSignal) => Parameters<Verifier<any>['verify']>[1],
  timeoutMs: number,
  outer: AbortSignal,
): Promise<VerifierResult> {
  return (await readWithTimeout(verifier, task, ctxFor, timeoutMs, outer)).result;
}

async function readWithTimeout(
  verifier: Verifier<any>,
  task: Parameters<Verifier<any>['verify']>[0],
  ctxFor: (signal: AbortSignal) => Parameters<Verifier<any>['verify']>[1],
  timeoutMs: number,
  outer: AbortSignal,
): Promise<Reading> {
  const own = new AbortController();
  const signal = AbortSignal.any([own.signal, outer]);
  let timer: NodeJS.Timeout | undefined;
  let onStop: (() => void) | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      own.abort(new Timeout());
      reject(new Timeout());
    }, timeoutMs);
    onStop = () => reject(new Error('stopped'));
    if (outer.aborted) onStop();
    else outer.addEventListener('abort', onStop, { once: true });
  });
  try {
    return { result: await Promise.race([Promise.resolve().then(() => verifier.verify(task, ctxFor(signal))), deadline]) };
  } catch (err) {
    if (outer.aborted) return { result: { verdict: 'unverifiable', reason: STOPPED } };
    if (err instanceof Timeout || own.signal.aborted) return { result: { verdict: 'unverifiable', reason: `${verifier.name}: timed out after ${timeoutMs} ms` } };
    if (err instanceof Refusal) return { result: { verdict: 'refused', reason: err.reason } };
    const message = err instanceof Error ? err.message : String(err);
    return { result: { verdict: 'unverifiable', reason: `${verifier.name}: ${message.split('\n')[0]}` }, thrown: err };
  } finally {
    clearTimeout(timer);
    if (onStop) outer.removeEventListener('abort', onStop);
  }
}

function validParams(verifier: Verifier<any>, params: unknown): { ok: true; data: unknown } | { ok: false; reason: string } {
  if (!verifier.params) return { ok: true, data: params };
  const r = verifier.params.safeParse(params);
  if (r.success) return { ok: true, data: r.data };
  const issue = r.error.issues[0];
  return { ok: false, reason: `with.${issue?.path.map(String).join('.') || '(root)'}: ${issue?.message ?? 'invalid'}` };
}

type History = Pick<DispatchOptions, 'accepted' | 'madeByDrift'>;

/**
 * The replacement a reading gives: the rule's template filled with the row's variables and the value read, as it
 * would be written (redacted), so that a row written from it compares equal the next time.
 */
function replacementFor(rule: CompiledRule, vars: Record<string, string>, value: unknown): { fact: string; source: string } | undefined {
  if (!rule.replacement) return undefined;
  const rvars = { ...vars, value: typeof value === 'string' ? value : JSON.stringify(value), verifier: rule.use };
  return redactSecrets({ fact: fill(rule.replacement.fact, rvars), source: fill(rule.replacement.source, rvars) });
}

/**
 * Is this row one the rule's replacement wrote (for some value)? Drift wrote it (its source carries the `drift:`
 * prefix, or the state db says so) and its fact and source fit the templates with `${value}` left open. Such a row
 * states what the source said; the rule's `expect` describes the fact it replaced.
 */
export function isReplacementRow(rule: CompiledRule, vars: Record<string, string>, memory: MemoryUnderReview, history: History): boolean {
  if (!rule.replacement) return false;
  if (memory.source === vars.source && history.madeByDrift?.(memory.id) !== true) return false;
  const fits = (t: Template, text: string) => {
    // Literal text as written to the store: an environment value in the template was recorded redacted.
    const parts = t.map((p) => (typeof p === 'string' ? escapeRegex(redactText(p)) : p.v === 'value' ? '[\\s\\S]*' : escapeRegex(p.v === 'verifier' ? rule.use : vars[p.v] ?? '')));
    return new RegExp(`^${parts.join('')}$`).test(text);
  };
  return fits(rule.replacement.source, memory.source) && fits(rule.replacement.fact, memory.fact);
}

/**
 * From a verifier's result to a verdict: its own judgement, else the rule's expect, else the fingerprint. A
 * contradiction already answered is not answered again: a reading accepted for this row before (a person confirmed
 * it, or the row was made from it), or a replacement identical to the row, settles as `confirmed`. `expectHeld`: the
 * rule's expect judged where the value was read (a verify task sends the value redacted, src/drift/task.ts).
 */
export function decide(memory: MemoryUnderReview, rule: CompiledRule, vars: Record<string, string>, result: VerifierResult, history: History, expectHeld?: boolean): Decision {
  const { accepted } = history;
  const base = { memory, verifier: rule.use, rule: rule.name };
  if (isNoReading(result)) {
    const evidence = { reason: result.reason, ...result.evidence };
    return { ...base, verdict: result.verdict, evidence, fingerprint: null, needsPerson: result.verdict === 'refused' };
  }
  const fingerprint = result.fingerprint ?? fingerprintOf(result.value);
  const reading = { value: result.value, fingerprint, ...result.evidence };
  const confirmed = (extra: Record<string, unknown> = {}): Decision => ({ ...base, verdict: 'confirmed', evidence: { current: reading, ...extra }, fingerprint, needsPerson: false });
  const replacement = replacementFor(rule, vars, result.value);
  if (!result.verdict && !rule.expect) {
    const before = accepted(memory.id, rule.use);
    // No expect and no reading yet: the first one would become the baseline. Where the rule says what a memory
    // agreeing with a reading reads like (a replacement with ${value}), one that does not read like it is not
    // confirmed because something was read: a person decides, shown what the rule would write.
    const tracksValue = rule.replacement?.fact.some((p) => typeof p !== 'string' && p.v === 'value') ?? false;
    if (!before && replacement && tracksValue && replacement.fact !== memory.fact && !isReplacementRow(rule, vars, memory, history)) {
      const note = 'first reading, and the memory does not say what the rule\'s replacement says for it: a person decides';
      return { ...base, verdict: 'contradicted', evidence: { current: reading, replacement, note }, fingerprint, needsPerson: true };
    }
    return byFingerprint(base, reading, before);
  }
  let judged = result.verdict ?? ((expectHeld ?? judge(rule.expect!, result.value, vars)) ? 'confirmed' : 'contradicted');
  if (!result.verdict && replacement && isReplacementRow(rule, vars, memory, history)) {
    // The rule's own answer is judged by what the replacement says now, not by `expect` (that is the old fact's).
    const same = replacement.fact === memory.fact && replacement.source === memory.source;
    // Same text: the row says what this reading says, unless the replacement ignores the value (a fixed "no longer
    // X") and expect holds again: then the old fact is back and only a person can word the row.
    const tracksValue = rule.replacement!.fact.some((p) => typeof p !== 'string' && p.v === 'value');
    if (same && (judged === 'contradicted' || tracksValue)) return confirmed({ settled: 'the row already says what the source says (it is this reading\'s replacement)' });
    if (same) return { ...base, verdict: 'contradicted', evidence: { current: reading, note: 'expect holds again, and the replacement would not change the row: a person decides' }, fingerprint, needsPerson: true };
    judged = 'contradicted';
  } else if (judged === 'confirmed') return confirmed();
  else if (accepted(memory.id, rule.use)?.fingerprint === fingerprint) return confirmed({ settled: 'this reading was accepted for this row before' });
  else if (replacement && replacement.fact === memory.fact && replacement.source === memory.source) return confirmed({ settled: 'the row already says what the replacement would' });
  const evidence: Record<string, unknown> = { current: reading };
  if (!replacement) return { ...base, verdict: 'contradicted', evidence, fingerprint, needsPerson: true };
  evidence.replacement = replacement;
  if (!rule.autoSupersede) return { ...base, verdict: 'contradicted', evidence, fingerprint, needsPerson: true };
  return { ...base, verdict: 'contradicted', evidence, fingerprint, needsPerson: false, supersede: replacement };
}

/**
 * A rule without `expect`: the first reading is the baseline (recorded as `confirmed`, so the row is not due again
 * before review.afterDays), the same reading confirms, another one is `changed` and goes to a person.
 */
function byFingerprint(base: Pick<Decision, 'memory' | 'verifier' | 'rule'>, reading: { fingerprint: string } & Record<string, unknown>, before: VerdictRow | undefined): Decision {
  const { fingerprint } = reading;
  if (!before) {
    const evidence = { baseline: 1, reason: 'first reading recorded as the baseline; the rule has no expect, later readings are compared with it', current: reading };
    return { ...base, verdict: 'confirmed', evidence, fingerprint, needsPerson: false };
  }
  if (before.fingerprint === fingerprint) return { ...base, verdict: 'confirmed', evidence: { current: reading }, fingerprint, needsPerson: false };
  const previous = { checkedAt: before.checked_at, fingerprint: before.fingerprint, ...(JSON.parse(before.evidence ?? '{}') as { current?: object }).current };
  return { ...base, verdict: 'changed', evidence: { previous, current: reading }, fingerprint, needsPerson: true };
}

/** A memory a verifier can check: the rule it matched, its variables, the verifier and its filled-in parameters. */
export interface Planned {
  memory: MemoryUnderReview;
  rule: CompiledRule;
  vars: Record<string, string>;
  verifier: Verifier<any>;
  params: Record<string, unknown>;
}

/**
 * The collect step for one memory, before any source is read: the rule it matches, refusals, the verifier's
 * parameters. A memory that reads nothing (no rule, refused, parameters the verifier rejects) gets its decision here.
 */
export function planVerification(memory: MemoryUnderReview, rules: readonly CompiledRule[], registry: VerifierRegistry): { plan: Planned } | { decision: Decision } {
  const match = matchRule(rules, memory);
  if (!match) {
    return { decision: { memory, verdict: 'unverifiable', verifier: null, rule: null, evidence: { reason: 'no rule matches this source: a person has to check it' }, fingerprint: null, needsPerson: true } };
  }
  const { rule, vars } = match;
  const base = { memory, verifier: rule.use, rule: rule.name, fingerprint: null };
  if (match.refused) return { decision: { ...base, verdict: 'refused', evidence: { reason: match.refused }, needsPerson: true } };
  const verifier = registry.get(rule.use);
  if (!verifier) return { decision: { ...base, verdict: 'unverifiable', evidence: { reason: `no verifier named "${rule.use}"` }, needsPerson: false } };
  const params = validParams(verifier, fillTree(rule.params, vars));
  if (!params.ok) return { decision: { ...base, verdict: 'unverifiable', evidence: { reason: `${rule.name}: ${params.reason}` }, needsPerson: false } };
  return { plan: { memory, rule, vars, verifier, params: params.data as Record<string, unknown> } };
}

/** What reading a source needs besides the plan: the run's shared reads, allowlists, clock, stop signal. */
export interface ReadEnv {
  cache: ReadCache;
  /** verify.allow with fileRoots as real paths (realRoots). */
  allow: Allowlists;
  /** verify.allow.fileRoots as configured. */
  configuredRoots: readonly string[];
  cacheDir: string;
  timeoutMs: number;
  log: Logger;
  now: Instant;
  signal: AbortSignal;
}

/**
 * Read the source a plan names, within the rule's timeout: the one step that runs as a task under the worker.
 * The fingerprint is taken here, from the value as read, so it is the same whether the result then crosses Redis.
 */
export async function readSource(plan: Planned, env: ReadEnv): Promise<Reading> {
  const { memory, rule, vars, verifier, params } = plan;
  const log = env.log.child({ memory: memory.id, verifier: verifier.name });
  const reading = await readWithTimeout(
    verifier,
    { memory, params, captures: vars },
    (signal) => createVerifierContext({ signal, log, now: env.now, allow: env.allow, cacheDir: env.cacheDir, cache: env.cache, configuredRoots: env.configuredRoots }),
    rule.timeoutMs ?? env.timeoutMs,
    env.signal,
  );
  // Reasons and evidence are for people and cross Redis under the worker: no value from the environment in them.
  // The value itself stays as read until it is judged (an `expect` may name an environment value); the decision
  // is redacted before it is recorded (redactDecision).
  const r = reading.result;
  if (isNoReading(r)) return { ...reading, result: { ...r, reason: redactSecrets(r.reason), ...(r.evidence ? { evidence: redactSecrets(r.evidence) } : {}) } };
  const evidence = r.evidence ? { evidence: redactSecrets(r.evidence) } : {};
  return { ...reading, result: { ...r, ...evidence, fingerprint: r.fingerprint ?? fingerprintOf(r.value) } };
}

/**
 * A decision as it may be recorded and printed: values from the environment (src/text/secrets.ts) taken out of its
 * evidence and of the replacement row. The memory itself is left as the store has it: applying compares with it.
 */
export function redactDecision(d: Decision): Decision {
  const out: Decision = { ...d, evidence: redactSecrets(d.evidence) };
  if (d.supersede) out.supersede = redactSecrets(d.supersede);
  return out;
}

async function verifyOne(memory: MemoryUnderReview, opts: DispatchOptions, env: Omit<ReadEnv, 'timeoutMs'>): Promise<Decision> {
  const planned = planVerification(memory, opts.rules, opts.registry);
  if ('decision' in planned) return planned.decision;
  const { result } = await readSource(planned.plan, { ...env, timeoutMs: opts.timeoutMs });
  return decide(memory, planned.plan.rule, planned.plan.vars, result, opts);
}

/**
 * Verify every memory inline, `concurrency` at a time (`memory-warden run drift`); one verifier's failure or hang
 * never affects the others. The worker sends the reads out as tasks instead (verifyThroughTasks, src/drift/task.ts).
 */
export async function verifyAll(memories: readonly MemoryUnderReview[], opts: DispatchOptions): Promise<DispatchResult> {
  const cache = new ReadCache();
  const allow: Allowlists = { ...opts.allow, fileRoots: realRoots(opts.allow.fileRoots) };
  const env = { cache, allow, configuredRoots: opts.allow.fileRoots, cacheDir: opts.cacheDir, log: opts.log, now: opts.now, signal: opts.signal };
  const decisions: (Decision | undefined)[] = new Array(memories.length);
  let next = 0;
  const worker = async () => {
    // A stopped run starts nothing new; what was not verified stays due for the next run.
    while (next < memories.length && !opts.signal.aborted) {
      const i = next++;
      decisions[i] = await verifyOne(memories[i]!, opts, env);
    }
  };
  await Promise.all(Array.from({ length: Math.min(opts.concurrency, memories.length) }, worker));
  // A verification cut short by the stop is not a verdict about the source: it is not recorded either.
  const done = opts.signal.aborted ? decisions.filter((d) => d && !(d.verdict === 'unverifiable' && d.evidence.reason === STOPPED)) : decisions;
  return { decisions: done.filter((d): d is Decision => d !== undefined), reads: cache.reads, sharedReads: cache.shared };
}

/**
 * Try a verifier by hand, as a plugin's own test does: real context, allowlists, timeout; a refusal or an error
 * comes back as a result, exactly as the drift job would record it.
 */
export async function runVerifier<P>(
  verifier: Verifier<P>,
  params: unknown,
  opts: { memory?: Partial<MemoryUnderReview>; allow?: Partial<Allowlists>; timeoutMs?: number; cacheDir?: string; now?: Instant; log?: Logger } = {},
): Promise<VerifierResult> {
  const checked = validParams(verifier as Verifier<any>, params);
  if (!checked.ok) return { verdict: 'unverifiable', reason: checked.reason };
  const memory: MemoryUnderReview = { id: 'm_test', subject: '', fact: '', source: '', confirmed_at: '', ...opts.memory };
  const allow: Allowlists = { fileRoots: realRoots(opts.allow?.fileRoots ?? []), gitRepos: opts.allow?.gitRepos ?? [], httpHosts: opts.allow?.httpHosts ?? [] };
  const cache = new ReadCache();
  return runWithTimeout(
    verifier as Verifier<any>,
    { memory, params: checked.data as Record<string, unknown>, captures: {} },
    (signal) => createVerifierContext({ signal, log: opts.log ?? silentLogger, now: opts.now ?? Date.now(), allow, cacheDir: opts.cacheDir ?? '.', cache }),
    opts.timeoutMs ?? 30_000,
    new AbortController().signal,
  );
}
