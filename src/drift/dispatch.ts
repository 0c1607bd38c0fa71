import { createHash } from 'node:crypto';
import type { Logger } from '../logger.js';
import { silentLogger } from '../logger.js';
import type { Instant } from '../time.js';
import { createVerifierContext, ReadCache, realRoots } from '../verifiers/context.js';
import { fill, fillTree, judge, matchRule, type CompiledRule } from '../verifiers/rules.js';
import type { VerifierRegistry } from '../verifiers/registry.js';
import { Refusal, isNoReading, type Allowlists, type MemoryUnderReview, type Verdict, type Verifier, type VerifierResult } from '../verifiers/types.js';
import type { VerdictRow } from './record.js';

/** What one memory's verification came to, before anything is written. */
export interface Decision {
  memory: MemoryUnderReview;
  verdict: Verdict;
  verifier: string | null;
  rule: string | null;
  evidence: Record<string, unknown>;
  fingerprint: string | null;
  needsPerson: boolean;
  /** contradicted, with a replacement and autoSupersede: the row to insert in place of this one. */
  supersede?: { fact: string; source: string };
}

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

/** Run one verifier with its own deadline. A verifier that ignores its signal still loses the race. */
export async function runWithTimeout(
  verifier: Verifier<any>,
  task: Parameters<Verifier<any>['verify']>[0],
  ctxFor: (signal: AbortSignal) => Parameters<Verifier<any>['verify']>[1],
  timeoutMs: number,
  outer: AbortSignal,
): Promise<VerifierResult> {
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
    return await Promise.race([Promise.resolve().then(() => verifier.verify(task, ctxFor(signal))), deadline]);
  } catch (err) {
    if (outer.aborted) return { verdict: 'unverifiable', reason: 'the run was stopped' };
    if (err instanceof Timeout || own.signal.aborted) return { verdict: 'unverifiable', reason: `${verifier.name}: timed out after ${timeoutMs} ms` };
    if (err instanceof Refusal) return { verdict: 'refused', reason: err.reason };
    const message = err instanceof Error ? err.message : String(err);
    return { verdict: 'unverifiable', reason: `${verifier.name}: ${message.split('\n')[0]}` };
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

/** From a verifier's result to a verdict: its own judgement, else the rule's expect, else the fingerprint. */
function decide(memory: MemoryUnderReview, rule: CompiledRule, vars: Record<string, string>, result: VerifierResult, opts: DispatchOptions): Decision {
  const base = { memory, verifier: rule.use, rule: rule.name };
  if (isNoReading(result)) {
    const evidence = { reason: result.reason, ...result.evidence };
    return { ...base, verdict: result.verdict, evidence, fingerprint: null, needsPerson: result.verdict === 'refused' };
  }
  const fingerprint = result.fingerprint ?? fingerprintOf(result.value);
  const reading = { value: result.value, fingerprint, ...result.evidence };
  let judged: 'confirmed' | 'contradicted' | undefined = result.verdict;
  if (!judged && rule.expect) judged = judge(rule.expect, result.value, vars) ? 'confirmed' : 'contradicted';
  if (!judged) {
    const before = opts.accepted(memory.id, rule.use);
    if (!before) {
      const evidence = { baseline: 1, reason: 'first reading recorded; the rule has no expect, later readings are compared with it', current: reading };
      return { ...base, verdict: 'unverifiable', evidence, fingerprint, needsPerson: false };
    }
    if (before.fingerprint === fingerprint) return { ...base, verdict: 'confirmed', evidence: { current: reading }, fingerprint, needsPerson: false };
    const previous = { checkedAt: before.checked_at, fingerprint: before.fingerprint, ...(JSON.parse(before.evidence ?? '{}') as { current?: object }).current };
    return { ...base, verdict: 'changed', evidence: { previous, current: reading }, fingerprint, needsPerson: true };
  }
  if (judged === 'confirmed') return { ...base, verdict: 'confirmed', evidence: { current: reading }, fingerprint, needsPerson: false };
  const evidence: Record<string, unknown> = { current: reading };
  if (!rule.replacement) return { ...base, verdict: 'contradicted', evidence, fingerprint, needsPerson: true };
  const rvars = { ...vars, value: typeof result.value === 'string' ? result.value : JSON.stringify(result.value), verifier: rule.use };
  const replacement = { fact: fill(rule.replacement.fact, rvars), source: fill(rule.replacement.source, rvars) };
  evidence.replacement = replacement;
  if (!rule.autoSupersede) return { ...base, verdict: 'contradicted', evidence, fingerprint, needsPerson: true };
  return { ...base, verdict: 'contradicted', evidence, fingerprint, needsPerson: false, supersede: replacement };
}

async function verifyOne(memory: MemoryUnderReview, opts: DispatchOptions, cache: ReadCache, allow: Allowlists): Promise<Decision> {
  const match = matchRule(opts.rules, memory);
  if (!match) {
    return { memory, verdict: 'unverifiable', verifier: null, rule: null, evidence: { reason: 'no rule matches this source: a person has to check it' }, fingerprint: null, needsPerson: true };
  }
  const { rule, vars } = match;
  const base = { memory, verifier: rule.use, rule: rule.name, fingerprint: null };
  if (match.refused) return { ...base, verdict: 'refused', evidence: { reason: match.refused }, needsPerson: true };
  const verifier = opts.registry.get(rule.use);
  if (!verifier) return { ...base, verdict: 'unverifiable', evidence: { reason: `no verifier named "${rule.use}"` }, needsPerson: false };
  const params = validParams(verifier, fillTree(rule.params, vars));
  if (!params.ok) return { ...base, verdict: 'unverifiable', evidence: { reason: `${rule.name}: ${params.reason}` }, needsPerson: false };
  const log = opts.log.child({ memory: memory.id, verifier: verifier.name });
  const result = await runWithTimeout(
    verifier,
    { memory, params: params.data as Record<string, unknown>, captures: vars },
    (signal) => createVerifierContext({ signal, log, now: opts.now, allow, cacheDir: opts.cacheDir, cache, configuredRoots: opts.allow.fileRoots }),
    rule.timeoutMs ?? opts.timeoutMs,
    opts.signal,
  );
  return decide(memory, rule, vars, result, opts);
}

/** Verify every memory, `concurrency` at a time; one verifier's failure or hang never affects the others. */
export async function verifyAll(memories: readonly MemoryUnderReview[], opts: DispatchOptions): Promise<DispatchResult> {
  const cache = new ReadCache();
  const allow: Allowlists = { ...opts.allow, fileRoots: realRoots(opts.allow.fileRoots) };
  const decisions: (Decision | undefined)[] = new Array(memories.length);
  let next = 0;
  const worker = async () => {
    // A stopped run starts nothing new; what was not verified stays due for the next run.
    while (next < memories.length && !opts.signal.aborted) {
      const i = next++;
      decisions[i] = await verifyOne(memories[i]!, opts, cache, allow);
    }
  };
  await Promise.all(Array.from({ length: Math.min(opts.concurrency, memories.length) }, worker));
  // A verification cut short by the stop is not a verdict about the source: it is not recorded either.
  const done = opts.signal.aborted ? decisions.filter((d) => d && !(d.verdict === 'unverifiable' && d.evidence.reason === 'the run was stopped')) : decisions;
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
