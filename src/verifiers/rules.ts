import { isDeepStrictEqual } from 'node:util';
import { configError } from '../core/errors.js';
import { rememberSecret } from '../text/secrets.js';
import type { RuleConfig, VerifyConfig } from './config.js';
import type { MemoryUnderReview } from './types.js';

/**
 * Rules from config, compiled once per run. Templates are split into literal text and variables when compiled,
 * so a value filled in at run time is never read again as a template: memory text cannot reach the environment.
 */
type Part = string | { v: string };
export type Template = Part[];
/** A string of `with`, compiled; a class so that it is never confused with an array or a mapping of the config. */
class TemplateString {
  constructor(readonly parts: Template) {}
}
type TemplateTree = TemplateString | TemplateTree[] | { [k: string]: TemplateTree } | number | boolean | null;

export type Expectation =
  | { kind: 'matches'; pattern: Template }
  | { kind: 'equals'; value: unknown };

export interface CompiledRule {
  index: number;
  name: string;
  use: string;
  source: RegExp;
  subject?: RegExp;
  fact?: RegExp;
  params: TemplateTree;
  expect?: Expectation;
  autoSupersede: boolean;
  replacement?: { fact: Template; source: Template };
  timeoutMs?: number;
}

const REF = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;
/** Variables every rule has besides its named groups. */
const MEMORY_VARS = ['id', 'subject', 'source', 'fact'];
/** What a replacement may use besides those: the value read and the verifier's name. */
const REPLACEMENT_VARS = ['value', 'verifier'];
/** The prefix a replacement's default source carries; stripped before rules match, so the new row is re-checked. */
export const DRIFT_SOURCE_PREFIX = /^(?:drift:[a-z][a-z0-9-]*:)+/;

function groupNames(re: RegExp): string[] {
  // Read from the pattern text: exec() only reports the groups of a match, and a rule must know them all up front.
  const names = new Set<string>();
  for (const m of re.source.matchAll(/\(\?<([A-Za-z_][A-Za-z0-9_]*)>/g)) names.add(m[1]!);
  return [...names];
}

/**
 * `fact: true` for `expect` and `replacement`: they say what the memory says, so an environment value there is the
 * text of a fact (compared, written to the store), not a credential to keep out of records.
 */
function compileTemplate(text: string, vars: ReadonlySet<string>, env: NodeJS.ProcessEnv, where: string, opts: { envOnly?: boolean; fact?: boolean } = {}): Template {
  const parts: Part[] = [];
  let last = 0;
  // Text between placeholders holds no `${`: one that is not `${NAME}` or `${NAME:-fallback}` (`${}`, `${A B}`,
  // `${A-x}`, no closing brace) would be sent as it is, a URL or path nobody meant.
  const literal = (chunk: string) => {
    if (chunk.includes('${')) throw configError(`config ${where}: "${clipPlaceholder(chunk)}" is not a placeholder: write \${NAME} or \${NAME:-fallback}`);
    return chunk;
  };
  for (const m of text.matchAll(REF)) {
    if (m.index > last) parts.push(literal(text.slice(last, m.index)));
    const name = m[1]!;
    if (vars.has(name)) {
      if (opts.envOnly) throw configError(`config ${where}: "\${${name}}" would put memory text here; only environment variables are allowed`);
      parts.push({ v: name });
    } else {
      const value = env[name];
      if (value !== undefined && value !== '') {
        if (!opts.fact) rememberSecret(name, value); // never to be recorded or printed: evidence, errors and logs are redacted
        parts.push(value);
      } else if (m[2] !== undefined) parts.push(m[2]);
      else throw configError(`config ${where}: "\${${name}}" is neither a named group of match nor a set environment variable`);
    }
    last = m.index + m[0].length;
  }
  if (last < text.length) parts.push(literal(text.slice(last)));
  return parts;
}

/** The malformed placeholder a literal holds, from its `${`, at most 40 characters. */
function clipPlaceholder(chunk: string): string {
  const at = chunk.slice(chunk.indexOf('${'));
  return at.length > 40 ? `${at.slice(0, 39)}…` : at;
}

function compileTree(value: unknown, vars: ReadonlySet<string>, env: NodeJS.ProcessEnv, where: string, envOnly = false): TemplateTree {
  if (typeof value === 'string') return new TemplateString(compileTemplate(value, vars, env, where, { envOnly }));
  if (Array.isArray(value)) return value.map((v, i) => compileTree(v, vars, env, `${where}.${i}`, envOnly));
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, compileTree(v, vars, env, `${where}.${k}`, envOnly || (k === 'headers' && where.endsWith('.with')))]),
    ) as TemplateTree;
  }
  return value as number | boolean | null;
}

function compileExpect(raw: unknown, vars: ReadonlySet<string>, env: NodeJS.ProcessEnv, where: string): Expectation {
  const asPattern = (text: string): Expectation => {
    const pattern = compileTemplate(text, vars, env, where, { fact: true });
    try {
      new RegExp(fill(pattern, {}, { regex: true, missing: 'x' }));
    } catch (err) {
      throw configError(`config ${where}: not a valid regular expression: ${(err as Error).message}`);
    }
    return { kind: 'matches', pattern };
  };
  if (typeof raw === 'string') return asPattern(raw);
  if (raw && typeof raw === 'object' && !Array.isArray(raw)) {
    const keys = Object.keys(raw);
    const o = raw as Record<string, unknown>;
    if (keys.length === 1 && keys[0] === 'matches' && typeof o.matches === 'string') return asPattern(o.matches);
    if (keys.length === 1 && keys[0] === 'equals') return { kind: 'equals', value: o.equals };
    throw configError(`config ${where}: expect is a regex string, a literal, { matches: REGEX } or { equals: VALUE }`);
  }
  return { kind: 'equals', value: raw };
}

export function compileRule(rule: RuleConfig, index: number, env: NodeJS.ProcessEnv = process.env): CompiledRule {
  const where = `verify.rules.${index}`;
  const source = new RegExp(rule.match.source);
  const subject = rule.match.subject !== undefined ? new RegExp(rule.match.subject) : undefined;
  const fact = rule.match.fact !== undefined ? new RegExp(rule.match.fact) : undefined;
  const groups = [...groupNames(source), ...(subject ? groupNames(subject) : []), ...(fact ? groupNames(fact) : [])];
  const clash = groups.find((g) => MEMORY_VARS.includes(g) || REPLACEMENT_VARS.includes(g));
  if (clash) throw configError(`config ${where}.match: group name "${clash}" is reserved (${[...MEMORY_VARS, ...REPLACEMENT_VARS].join(', ')})`);
  const vars = new Set([...groups, ...MEMORY_VARS]);
  const { expect, ...params } = rule.with;
  const compiled: CompiledRule = {
    index,
    name: rule.name ?? `rule ${index}`,
    use: rule.use,
    source,
    params: compileTree(params, vars, env, `${where}.with`),
    autoSupersede: rule.autoSupersede,
  };
  if (subject) compiled.subject = subject;
  if (fact) compiled.fact = fact;
  if (expect !== undefined) {
    compiled.expect = compileExpect(expect, vars, env, `${where}.with.expect`);
    // `expect` judges the memory's claim, so it must know it: taken from the memory (a group of match, ${fact}, …),
    // or the rule judges only memories whose fact says it (match.fact). A constant for every memory of a source
    // would confirm "prefers yarn" because the folder holds pnpm's lockfile, which the rule expected.
    const fromMemory = compiled.expect.kind === 'matches' && compiled.expect.pattern.some((p) => typeof p !== 'string');
    if (!fromMemory && !fact) {
      throw configError(`config ${where}.with.expect: compares what is read with a constant, whatever the memory says; add match.fact (the memories that claim it) or take expect from the memory ("\${group}" of match, "\${fact}")`);
    }
  }
  if (rule.timeoutMs !== undefined) compiled.timeoutMs = rule.timeoutMs;
  if (rule.replacement !== undefined) {
    const r = typeof rule.replacement === 'string' ? { fact: rule.replacement } : rule.replacement;
    const rvars = new Set([...vars, ...REPLACEMENT_VARS]);
    compiled.replacement = {
      fact: compileTemplate(r.fact, rvars, env, `${where}.replacement.fact`, { fact: true }),
      source: compileTemplate(r.source ?? 'drift:${verifier}:${source}', rvars, env, `${where}.replacement.source`, { fact: true }),
    };
  }
  return compiled;
}

export function compileRules(verify: Pick<VerifyConfig, 'rules'>, env: NodeJS.ProcessEnv = process.env): CompiledRule[] {
  return verify.rules.map((r, i) => compileRule(r, i, env));
}

/** Characters a shell would act on. Never passed to a shell anyway; a source carrying them is refused outright. */
const SHELL_META = /[`$;|<>\\\x00-\x1f\x7f]|&&/;

export interface RuleMatch {
  rule: CompiledRule;
  /** Named groups and the memory's id, subject and source (without a drift: prefix). */
  vars: Record<string, string>;
  /** Set when the memory must not be followed: the reason recorded with verdict `refused`. */
  refused?: string;
}

/** The first rule whose `match` fits the memory, or undefined (the row goes to a person). */
export function matchRule(rules: readonly CompiledRule[], memory: MemoryUnderReview): RuleMatch | undefined {
  const origin = memory.source.replace(DRIFT_SOURCE_PREFIX, '');
  for (const rule of rules) {
    const s = rule.source.exec(origin);
    if (!s) continue;
    const t = rule.subject ? rule.subject.exec(memory.subject) : null;
    if (rule.subject && !t) continue;
    const f = rule.fact ? rule.fact.exec(memory.fact) : null;
    if (rule.fact && !f) continue;
    const vars: Record<string, string> = { id: memory.id, subject: memory.subject, source: origin, fact: memory.fact };
    for (const [k, v] of Object.entries({ ...s.groups, ...t?.groups, ...f?.groups })) vars[k] = v ?? '';
    const found: RuleMatch = { rule, vars };
    if (SHELL_META.test(origin)) found.refused = 'source contains shell metacharacters or control characters';
    else {
      const bad = Object.entries(t?.groups ?? {}).find(([, v]) => v !== undefined && SHELL_META.test(v));
      const badFact = Object.entries(f?.groups ?? {}).find(([, v]) => v !== undefined && SHELL_META.test(v));
      if (bad) found.refused = `subject group "${bad[0]}" contains shell metacharacters or control characters`;
      else if (badFact) found.refused = `fact group "${badFact[0]}" contains shell metacharacters or control characters`;
    }
    return found;
  }
  return undefined;
}

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');

/** Fill a template. Values going into a regex are escaped: memory text is matched literally, never as a pattern. */
export function fill(t: Template, vars: Readonly<Record<string, string>>, opts: { regex?: boolean; missing?: string } = {}): string {
  return t
    .map((p) => {
      if (typeof p === 'string') return p;
      const v = vars[p.v] ?? opts.missing ?? '';
      return opts.regex ? escapeRegex(v) : v;
    })
    .join('');
}

export function fillTree(tree: TemplateTree, vars: Readonly<Record<string, string>>): unknown {
  if (tree instanceof TemplateString) return fill(tree.parts, vars);
  if (Array.isArray(tree)) return tree.map((t) => fillTree(t, vars));
  if (tree && typeof tree === 'object') return Object.fromEntries(Object.entries(tree).map(([k, v]) => [k, fillTree(v, vars)]));
  return tree;
}

/** true: the source still says it; false: it says otherwise. */
export function judge(expect: Expectation, value: unknown, vars: Readonly<Record<string, string>>): boolean {
  if (expect.kind === 'matches') {
    if (value === undefined || value === null) return false;
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    return new RegExp(fill(expect.pattern, vars, { regex: true })).test(text);
  }
  const want = expect.value;
  if ((typeof want === 'number' && typeof value === 'string') || (typeof want === 'string' && typeof value === 'number')) {
    return String(want) === String(value);
  }
  return isDeepStrictEqual(want, value);
}
