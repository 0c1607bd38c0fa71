import type { Config } from '../config/config.js';
import { expandHome } from '../config/config.js';
import { configError } from '../core/errors.js';
import { loadPlugins } from '../verifiers/plugins.js';
import { createRegistry, type VerifierRegistry } from '../verifiers/registry.js';
import { compileRules, fillTree, type CompiledRule } from '../verifiers/rules.js';
import type { Allowlists } from '../verifiers/types.js';

export interface Verification {
  registry: VerifierRegistry;
  rules: CompiledRule[];
  allow: Allowlists;
  cacheDir: string;
  concurrency: number;
  timeoutMs: number;
}

/** Issue codes that show a rule's `with` is wrong whatever memory fills its templates. */
const STRUCTURAL = new Set(['unrecognized_keys', 'invalid_type', 'invalid_value']);

/**
 * Load plugins, build the registry, compile the rules and check each against its verifier: a rule naming an
 * unknown verifier or giving it unknown or mistyped parameters is a config error at start, not a verdict later.
 */
export async function prepareVerification(config: Config, env: NodeJS.ProcessEnv = process.env): Promise<Verification> {
  const v = config.verify;
  const registry = createRegistry(await loadPlugins(v.plugins));
  const rules = compileRules(v, env);
  for (const rule of rules) {
    const verifier = registry.get(rule.use);
    if (!verifier) throw configError(`config verify.rules.${rule.index}.use: no verifier named "${rule.use}" (known: ${[...registry.keys()].join(', ')})`);
    if (!verifier.params) continue;
    const sample = fillTree(rule.params, new Proxy({}, { get: () => 'x' }) as Record<string, string>);
    const r = verifier.params.safeParse(sample);
    const issue = r.success ? undefined : r.error.issues.find((i) => STRUCTURAL.has((i as { code?: string }).code ?? ''));
    if (issue) throw configError(`config verify.rules.${rule.index}.with.${issue.path.map(String).join('.') || '(root)'}: ${issue.message}`);
  }
  return {
    registry,
    rules,
    allow: v.allow,
    cacheDir: expandHome(v.cacheDir),
    concurrency: v.concurrency,
    timeoutMs: v.timeoutMs,
  };
}
