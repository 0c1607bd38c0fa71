import { fileURLToPath } from 'node:url';
import { readFileSync } from 'node:fs';
import { dirname, resolve, isAbsolute, relative } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { z } from '../vendor/zod.js';
import { timerDuration } from '../time/timer-duration.js';
import { pathField } from './path-field.js';
import { configError } from '../core/errors.js';
import { LOG_LEVELS } from '../log/levels.js';
import { storeSchema } from '../store/config.js';
import { assertStateApart } from '../store/files.js';
import { assertSnapshotRootApart } from '../snapshot/root.js';
import { digestSchema, smtpSchema } from '../digest/config.js';
import { verifySchema, resolveVerifyPaths } from '../verifiers/config.js';
import { workerSchema, redisSchema } from '../queue/config.js';
import { resolveTargetPaths, targetsSchema } from '../snapshot/targets/config.js';
import { checkSecrets } from './secret-fields.js';
import { reviewWebShape } from '../review-web/config.js';
import { resolveMem0Paths } from '../layouts/mem0/config.js';
import { unknownKeysHint } from './suggest.js';
import {
  DEFAULT_CONFIG_PATH, DEFAULTS_CACHE_PATH, QUICK_LEAVES, STORE_NAME, STORE_NAME_RULE, expandEnv, isPathText, isPlainObject, merge, parseYaml,
  readDefaults, readYaml, sha256, type LoadOptions, type QuickCache,
} from './read.js';

// Reading (defaults, YAML, env, merge) lives in src/config/read.ts, which loads no zod; these were always here.
export { DEFAULT_CONFIG_PATH, DEFAULTS_CACHE_PATH, RULES_CONFIG_PATH, expandEnv, expandHome, merge, selectStore, quickConfig } from './read.js';
export type { LoadOptions } from './read.js';

/**
 * Config is read in one direction: defaults (config/default.yaml) → the user's YAML → `${ENV}` expansion →
 * validation. A wrong field is one line naming its path and what was expected.
 */
export const configSchema = z.strictObject({
  busyTimeoutMs: timerDuration('ms').int().nonnegative().default(5000)
    .describe('How long a connection waits for the agent\'s write lock before giving up (PRAGMA busy_timeout); a held lock means waiting, not failing.'),
  stateDb: pathField().default('~/.local/state/memory-warden/state.db')
    .describe('memory-warden\'s own records (job runs, digest deliveries, verdicts, receipts); `~` is the home folder.'),
  eraseKeyFile: pathField().optional()
    .describe('The erase key (64 hex digits, 0600): every hash kept of an erased person is made under it, and the state db records which key. Unset: `erase.key` in stateDb\'s folder. Keep it, and back it up, apart from the state db: whoever holds both can test the hashes against guesses.'),
  log: z.strictObject({
    level: z.enum(LOG_LEVELS).default('info').describe('Log level (`--log-level` and `LOG_LEVEL` override it).'),
  }).prefault({}),
  prune: z
    .strictObject({
      expired: z.boolean().default(true).describe('Delete rows whose `expires_at` has passed (compared as instants).'),
      supersededAfterDays: z.number().nonnegative().default(180)
        .describe('Delete superseded rows created more than this many days ago, with the older versions behind them.'),
      batchSize: z.number().int().positive().default(300000)
        .describe('At most this many rows per write transaction (time bounds a batch first: `batchMs`).'),
      batchMs: z.number().positive().default(15)
        .describe('Each batch holds the write lock about this long while someone writes, so an agent\'s busy-handler retry 18 ms after its first try gets in; larger is faster and makes the agent wait longer.'),
      quietBatchMs: z.number().positive().default(1000)
        .describe('How long a batch lasts once no other connection has committed for half a second; a writer that turns up then waits one such batch at most.'),
      pauseMs: z.number().nonnegative().default(30)
        .describe('After each batch the write lock is left free for the agent up to this long.'),
      candidateRows: z.number().int().positive().default(524288)
        .describe('Rows each rule reads from its index at a time, in rowid order, while the prune works through them: bounds its memory whatever the store\'s size (a larger store is read in more passes).'),
      windowEndsOnCommit: z.boolean().default(true)
        .describe('The window after a batch closes as soon as another connection commits (fastest beside one agent); false: it always lasts `pauseMs`, fairer when several processes write to the store.'),
    })
    .prefault({}),
  review: z
    .strictObject({
      afterDays: z.number().nonnegative().default(90)
        .describe('Live rows confirmed longer ago than this are due for review (drift).'),
      batch: z.number().int().positive().default(20)
        .describe('At most this many rows a week go to review: 20 is a review someone does.'),
      ...reviewWebShape,
    })
    .prefault({}),
  snapshot: z
    .strictObject({
      root: pathField().default('./backups')
        .describe('One dated folder per store and snapshot under `<root>/<store>/`; never equal to or inside a store\'s own folder.'),
      keep: z.number().int().positive().default(7)
        .describe('Scheduled snapshots kept per store; older ones are deleted after a verified new one (pre-restore snapshots and folders that are not verified snapshots of the store are never deleted).'),
      /** Copies off the machine: each completed snapshot is uploaded to each target (src/snapshot/targets). */
      targets: targetsSchema
        .describe('Copies off the machine: after each snapshot the job uploads every local scheduled snapshot a target lacks (newest `keep`), then applies that target\'s retention.'),
    })
    .prefault({}),
  redis: redisSchema.prefault({}),
  worker: workerSchema.prefault({}),
  smtp: smtpSchema.optional(),
  digest: digestSchema.prefault({}),
  verify: verifySchema.prefault({}),
  stores: z.record(z.string().regex(STORE_NAME, STORE_NAME_RULE), storeSchema).prefault({}).superRefine(namesApartInAnyCase),
});

export type Config = z.infer<typeof configSchema>;

/** `Agent` and `agent` would share one snapshot folder on a case-insensitive file system (macOS, Windows, some NAS). */
function namesApartInAnyCase(stores: Record<string, unknown>, ctx: z.RefinementCtx): void {
  const seen = new Map<string, string>();
  for (const name of Object.keys(stores)) {
    const other = seen.get(name.toLowerCase());
    if (other !== undefined) ctx.addIssue({ code: 'custom', path: [name], message: `differs from store "${other}" only in case: they would share one snapshot folder` });
    seen.set(name.toLowerCase(), name);
  }
}

export function validateConfig(raw: unknown, source = 'config'): Config {
  const result = configSchema.safeParse(raw);
  if (!result.success) {
    // A key the schema does not know first: a misspelled `db` is why `db` is missing, and the one thing to fix.
    const issue = result.error.issues.find((i) => i.code === 'unrecognized_keys') ?? result.error.issues[0]!;
    if (issue.code === 'invalid_key') {
      // A key refused (a store's name): quoted, as it may hold anything, and the rule it broke, not zod's words.
      const key = JSON.stringify(String(issue.path.at(-1)));
      throw configError(`${source}: ${issue.path.slice(0, -1).map(String).join('.')}: ${key}: ${issue.issues[0]?.message ?? issue.message}`);
    }
    const where = issue.path.map(String).join('.') || '(root)';
    const extra = issue.code === 'unrecognized_keys' ? unknownKeysHint(configSchema, issue.path, issue.keys) : '';
    throw configError(`${source}: ${where}: ${issue.message}${extra}`);
  }
  return result.data;
}

/** Load, expand and validate. Relative paths in the user's file resolve against that file's folder. */
export function loadConfig(opts: LoadOptions = {}): Config {
  const env = opts.env ?? process.env;
  const defaults = readDefaults();
  let user: unknown = {};
  if (opts.file) {
    user = readYaml(opts.file);
    if (!isPlainObject(user)) throw configError(`config ${opts.file}: expected a mapping at the top level`);
  }
  // With a file, a relative path means the file's folder, whether the file or the defaults (snapshot.root's
  // `./backups`) gave it: never the folder the command was run from. `--db` (overrides) is the command line's.
  const configured = opts.file ? resolveRelativePaths(merge(defaults, user) as Record<string, unknown>, dirname(resolve(opts.file))) : merge(defaults, user);
  const merged = merge(configured, opts.overrides);
  checkSecrets(merged, opts.file ? `config ${opts.file}` : 'config');
  const expanded = expandEnv(merged, env, [], opts.file);
  const config = validateConfig(expanded, opts.file ? `config ${opts.file}` : 'config');
  assertStateApart(config);
  assertSnapshotRootApart(config, opts.file ? `config ${opts.file}` : 'config');
  return config;
}

function resolveRelativePaths(user: Record<string, unknown>, base: string): Record<string, unknown> {
  // Only what can name a file is resolved: an empty or blank path left as written is refused by the schema (resolved,
  // "" was the config file's own folder).
  const abs = (p: unknown) =>
    typeof p === 'string' && isPathText(p) && !p.includes('${') && !p.startsWith('~') && !isAbsolute(p) ? resolve(base, p) : p;
  const out = { ...user };
  if (isPlainObject(out.stores)) {
    out.stores = Object.fromEntries(
      Object.entries(out.stores).map(([name, s]) => [name, isPlainObject(s) ? { ...s, db: abs(s.db), ...('mem0' in s ? { mem0: resolveMem0Paths(s.mem0, abs) } : {}), ...('mastra' in s ? { mastra: resolveMem0Paths(s.mastra, abs) } : {}), ...(isPlainObject(s.postgres) && typeof s.postgres.caFile === 'string' ? { postgres: { ...s.postgres, caFile: abs(s.postgres.caFile) } } : {}) } : s]),
    );
  }
  if (typeof out.stateDb === 'string') out.stateDb = abs(out.stateDb);
  if (typeof out.eraseKeyFile === 'string') out.eraseKeyFile = abs(out.eraseKeyFile);
  if (isPlainObject(out.snapshot)) out.snapshot = { ...out.snapshot, root: abs(out.snapshot.root), targets: resolveTargetPaths(out.snapshot.targets, abs) };
  if (isPlainObject(out.verify)) out.verify = resolveVerifyPaths(out.verify, abs);
  const tls = isPlainObject(out.redis) && isPlainObject(out.redis.tls) ? out.redis.tls : undefined;
  if (tls && typeof tls.caFile === 'string') out.redis = { ...(out.redis as object), tls: { ...tls, caFile: abs(tls.caFile) } };
  const auth = isPlainObject(out.review) && isPlainObject(out.review.auth) ? out.review.auth : undefined;
  if (auth && typeof auth.usersFile === 'string') out.review = { ...(out.review as object), auth: { ...auth, usersFile: abs(auth.usersFile) } };
  return out;
}

/** What scripts/config-defaults.ts writes, or undefined when default.yaml's values do not survive JSON exactly. */
export function defaultsCacheText(yamlText: string): string | undefined {
  const value = parseYaml(yamlText, DEFAULT_CONFIG_PATH);
  if (!isDeepStrictEqual(JSON.parse(JSON.stringify(value)), value)) return undefined;
  const quick = quickCache(value);
  return JSON.stringify({ sha256: sha256(yamlText), value, ...(quick ? { quick } : {}) });
}

const SENTINEL = '/quick-config/sentinel';

/**
 * zod's output for the defaults, and the proof of each claim src/config/read.ts quickConfig relies on: each leaf of
 * QUICK_LEAVES comes out as it went in, a store given only `db` comes out as `store` with that `db`, and the output
 * survives JSON. Undefined when any claim fails (quickConfig then always defers to zod). `sources` are the compiled
 * modules this one imports, transitively (the schema's code): the cache stands only while they are unchanged.
 */
function quickCache(defaults: unknown): QuickCache | undefined {
  if (!isPlainObject(defaults) || (defaults.stores !== undefined && !isDeepStrictEqual(defaults.stores, {}))) return undefined;
  const { stores: _, ...input } = expandEnv(defaults, {}) as Record<string, unknown>;
  const output = validateConfig(structuredClone(input));
  if (!isDeepStrictEqual(JSON.parse(JSON.stringify(output)), output)) return undefined;
  for (const path of QUICK_LEAVES) {
    const probe = structuredClone(input);
    let at: Record<string, unknown> = probe;
    for (const k of path.slice(0, -1)) at = at[k] as Record<string, unknown>;
    at[path.at(-1)!] = SENTINEL;
    const got = JSON.stringify(validateConfig(probe));
    at = JSON.parse(JSON.stringify(output)) as Record<string, unknown>;
    const want = at;
    for (const k of path.slice(0, -1)) at = at[k] as Record<string, unknown>;
    at[path.at(-1)!] = SENTINEL;
    if (got !== JSON.stringify(want)) return undefined;
  }
  const withStore = validateConfig({ ...structuredClone(input), stores: { s: { db: SENTINEL } } });
  const store = withStore.stores.s as Record<string, unknown>;
  if (store.db !== SENTINEL || JSON.stringify(withStore) !== JSON.stringify({ ...output, stores: { s: store } })) return undefined;
  try {
    return { input, output: output as Record<string, unknown>, store: { ...store, db: '' }, sources: compiledSources() };
  } catch {
    return undefined; // not run from dist/ (the sources under test): no compiled modules to vouch for
  }
}

/** sha256 of this compiled module and every relative module it imports statically, by path from dist/src/. */
function compiledSources(): Record<string, string> {
  const here = dirname(DEFAULTS_CACHE_PATH);
  const out: Record<string, string> = {};
  const visit = (file: string) => {
    const key = relative(here, file);
    if (key in out) return;
    const text = readFileSync(file, 'utf8');
    out[key] = sha256(text);
    for (const m of text.matchAll(/^(?:import|export)\s[^;]*?from\s+'(\.{1,2}\/[^']+\.js)'/gm)) visit(resolve(dirname(file), m[1]!));
  };
  visit(fileURLToPath(import.meta.url)); // this module, wherever the build put it (dist/src/config/config.js)
  return out;
}
