import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CronExpressionParser } from 'cron-parser';
import YAML from 'yaml';
import { CLI } from './helpers/cli.js';
import { makeStore, tempDir } from './helpers/store.js';
import { JOBS } from '../jobs/index.js';
import { JOB_SCOPES } from '../src/commands/job-names.js';
import { JOB_LOADERS } from '../src/commands/job-loaders.js';
import { DEFAULT_CONFIG_PATH, loadConfig, type LoadOptions } from '../src/config/config.js';
import { BUNDLE_MANIFEST, type BundleManifest } from '../src/launch.js';
import type { quickConfig } from '../src/config/read.js';
import { storePayload, storePayloadZod } from '../src/job/payload.js';
import { mem0Schema } from '../src/layouts/mem0/config.js';
import { MEM0_DEFAULTS, mem0Of } from '../src/layouts/mem0/names.js';
import { DEFAULT_PATTERNS, isTimeZone } from '../src/queue/config.js';

const TRACE_HOOK = fileURLToPath(new URL('./helpers/load-trace.mjs', import.meta.url));
const DIST = fileURLToPath(new URL('../dist/', import.meta.url));

/** What a command's start-up must not pay for: queue, vectors, mail, web, secret scanning, pretty logs, metrics. */
const HEAVY = [
  'bullmq', 'ioredis', '@qdrant/js-client-rest', 'undici', 'nodemailer', 'hono', '@hono/node-server',
  'smol-toml', 'dotenv', 'pino-pretty', 'prom-client', 'yaml',
  'cron-parser', 'luxon',
];

const COMMANDS = ['init', 'check', 'run', 'repair', 'config', 'erase', 'digest', 'worker', 'schedule', 'enqueue', 'fleet', 'snapshots', 'restore', 'review', 'serve'];

interface Traced {
  code: number;
  stdout: string;
  stderr: string;
  /** Packages (node_modules names) the process loaded. */
  packages: Set<string>;
  /** The project's own modules it loaded, relative to dist/ (a chunk of the build's bundle counts as its modules). */
  own: string[];
  /** It ran the build's bundle (src/launch.ts), not the modules. */
  bundled: boolean;
}

/** The build's bundle: each chunk's modules, by path from the package root (scripts/bundle.ts). */
const bundleChunks = (): Record<string, string[]> =>
  (JSON.parse(readFileSync(join(DIST, 'src', BUNDLE_MANIFEST), 'utf8')) as BundleManifest).chunks;

/** Run the built CLI with the load-trace hook: what it printed, and every module it loaded. */
function traced(dir: string, args: string[], env: Record<string, string> = {}): Traced {
  const out = join(dir, `trace-${Math.random().toString(36).slice(2)}.txt`);
  const r = spawnSync(process.execPath, ['--import', TRACE_HOOK, CLI, ...args], {
    encoding: 'utf8',
    env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_STATE: join(dir, 'state.db'), ...env, LOAD_TRACE_OUT: out },
    timeout: 60_000,
  });
  const loaded = existsSync(out) ? readFileSync(out, 'utf8').split('\n').filter(Boolean) : [];
  // A chunk of the bundle stands for the modules in it: the CLI's own (dist/…) and a package's (node_modules/…).
  const chunks = bundleChunks();
  const chunkOf = (f: string) => (f.startsWith(join(DIST, 'src/')) ? chunks[f.slice(join(DIST, 'src/').length)] : undefined);
  const bundled = loaded.some((f) => chunkOf(f) !== undefined);
  const files = loaded.flatMap((f) => chunkOf(f)?.map((m) => join(DIST, '..', m)) ?? [f]);
  const packages = new Set(files.flatMap((f) => {
    const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(f);
    return m ? [m[1]!] : [];
  }));
  const own = files.filter((f) => f.startsWith(DIST)).map((f) => f.slice(DIST.length));
  // A package the build bundled into one file (scripts/vendor.ts) counts as that package.
  for (const f of own) {
    const m = /^src\/vendor\/([^/.]+)\.c?js$/.exec(f);
    if (m) packages.add(m[1]!);
  }
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr, packages, own, bundled };
}

// Both ways the CLI runs (src/cli.ts): the build's bundle, as users run it, and the modules themselves (MEMORY_WARDEN_BUNDLE=0,
// or no bundle). The bundle's chunks split where the modules import lazily; each chunk counts as the modules in it.
describe.each<{ mode: string; env: Record<string, string>; bundled: boolean }>([
  { mode: 'from the bundle', env: {}, bundled: true },
  { mode: 'from the modules', env: { MEMORY_WARDEN_BUNDLE: '0' }, bundled: false },
])('CLI start-up loads only what the command needs ($mode)', ({ env: modeEnv, bundled }) => {
  const run = (dir: string, args: string[], env: Record<string, string> = {}): Traced => {
    const r = traced(dir, args, { ...modeEnv, ...env });
    expect(r.bundled).toBe(bundled);
    return r;
  };
  let dir: string;
  let cleanup: () => void;
  let db: string;
  beforeAll(() => {
    ({ dir, cleanup } = tempDir('mw-startup-'));
    db = makeStore(join(dir, 'small.db'), Array.from({ length: 10 }, (_, i) => ({ id: `m${i}`, fact: `fact ${i}` })));
    // What `npm run build` does after tsc: the parsed defaults, so that no YAML parser loads without a config file.
    const gen = spawnSync(process.execPath, [join(DIST, 'scripts/config-defaults.js')], { encoding: 'utf8' });
    expect(gen.status, gen.stderr).toBe(0);
  });
  afterAll(() => cleanup());

  it('--help lists every command and loads no package but commander', () => {
    const r = run(dir, ['--help']);
    expect(r.code).toBe(0);
    for (const name of COMMANDS) expect(r.stdout).toMatch(new RegExp(`^  ${name}\\b`, 'm'));
    expect([...r.packages]).toEqual(['commander']);
    expect(r.own.filter((f) => f.startsWith('jobs/'))).toEqual([]);
  });

  it('run --help lists every job without loading any', () => {
    const r = run(dir, ['run', '--help']);
    expect(r.code).toBe(0);
    for (const name of Object.keys(JOBS)) expect(r.stdout).toMatch(new RegExp(`^  ${name}\\b`, 'm'));
    expect([...r.packages]).toEqual(['commander']);
  });

  it('check --db on a small store loads none of the heavy packages and no other job', () => {
    const r = run(dir, ['check', '--db', db, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ ok: true, rows: 10, store: 'small' });
    expect(HEAVY.filter((p) => r.packages.has(p))).toEqual([]);
    expect(r.packages.has('better-sqlite3')).toBe(true); // the trace sees packages: this one the check needs
    expect(r.own.filter((f) => f.startsWith('jobs/'))).toEqual(['jobs/integrity.js']);
  });

  it('check --db loads no zod and no YAML, and of the layouts only what a check of a warden store runs', () => {
    const r = run(dir, ['check', '--db', db, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(['zod', 'yaml'].filter((p) => r.packages.has(p))).toEqual([]);
    // Loaded when their job runs (src/layouts/warden/index.ts, mem0/index.ts), or only with a config file / a recorded run.
    const lazy = [
      'src/config/config.js', 'src/state/state.js', 'src/store/config.js', 'src/layouts/mem0/config.js',
      'src/layouts/warden/prune.js', 'src/layouts/warden/erase.js', 'src/layouts/warden/delete.js', 'src/layouts/warden/consistency.js',
      'src/layouts/warden/new-rows.js', 'src/layouts/warden/apply.js', 'src/layouts/mem0/memories.js', 'src/layouts/mem0/check.js',
      'src/layouts/mem0/drift.js', 'src/layouts/mem0/erase.js', 'src/layouts/mem0/new-rows.js',
    ];
    expect(lazy.filter((f) => r.own.includes(f))).toEqual([]);
    expect(r.own).toContain('src/layouts/warden/check.js');
  });

  it('digest --preview loads neither the mailer nor the Redis client', () => {
    const r = run(dir, ['digest', '--preview', '--db', db]);
    expect(r.code, r.stderr).toBe(0);
    expect(['nodemailer', 'ioredis', 'bullmq'].filter((p) => r.packages.has(p))).toEqual([]);
  });

  it('digest --preview --db loads no zod and no YAML: the config\'s schemas and the fleet\'s task stay unloaded', () => {
    const r = run(dir, ['digest', '--preview', '--db', db]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^Subject: /);
    expect(['zod', 'yaml'].filter((p) => r.packages.has(p))).toEqual([]);
    const lazy = ['src/config/config.js', 'src/queue/config.js', 'src/digest/config.js', 'src/digest/sections-task.js', 'src/digest/send.js'];
    expect(lazy.filter((f) => r.own.includes(f))).toEqual([]);
    expect(r.own).toContain('src/digest/collect.js');
  });

  it('check in human form, and a failing check (exit 1), load no more', () => {
    const bad = makeStore(join(dir, 'dangling.db'), [{ id: 'a', fact: 'x', superseded_by: 'gone' }]);
    const r = run(dir, ['check', '--db', bad]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toMatch(/dangling/);
    expect(HEAVY.filter((p) => r.packages.has(p))).toEqual([]);
  });

  it('a config file is still parsed and validated in full (yaml, cron-parser, time zones load then)', () => {
    const file = join(dir, 'w.yaml');
    writeFileSync(file, `stores:\n  agent:\n    db: ${db}\nworker:\n  timezone: Europe/Rome\n  schedules:\n    prune: { pattern: "15 4 * * *" }\n`);
    const ok = run(dir, ['check', '--config', file, '--json']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.packages.has('yaml')).toBe(true);
    expect(ok.packages.has('cron-parser')).toBe(true);
    for (const [bad, message] of [
      ['worker:\n  schedules:\n    prune: { pattern: "61 2 * * *" }\n', /worker\.schedules\.prune\.pattern: not a cron pattern/],
      ['worker:\n  schedules:\n    prune: { pattern: "0 2 * * * * *" }\n', /not a cron pattern: .*too many fields/],
      ['worker:\n  timezone: Mars/Olympus_Mons\n', /worker\.timezone: not a time zone/],
      ['worker:\n  schedules:\n    prune: { pattern: "0 2 * * *", tz: Europe/Nowhere }\n', /worker\.schedules\.prune\.tz: not a time zone/],
    ] as const) {
      writeFileSync(file, `stores:\n  agent:\n    db: ${db}\n${bad}`);
      const r = run(dir, ['check', '--config', file]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(message);
    }
  });
});

describe('the cheap stand-ins agree with what they stand for', () => {
  it('job names and scopes for --help are those of jobs/index.ts; each loader loads that job', async () => {
    expect(Object.keys(JOB_SCOPES).sort()).toEqual(Object.keys(JOBS).sort());
    expect(Object.keys(JOB_LOADERS).sort()).toEqual(Object.keys(JOBS).sort());
    for (const [name, job] of Object.entries(JOBS)) {
      expect(JOB_SCOPES[name]).toBe(job.scope ?? 'store');
      expect((await JOB_LOADERS[name]!()).default).toBe(job);
    }
  });

  it('the integrity job\'s payload check gives zod\'s result for every payload, and loads zod only for a wrong one', () => {
    const zod = storePayloadZod();
    const payloads: unknown[] = [
      { store: 'a' }, { store: 'agent.main_1' }, { store: '' }, { store: 1 }, { store: null }, {}, { store: 'a', extra: 1 },
      { stores: ['a'] }, null, undefined, 'a', 1, [], ['a'], Object.assign(Object.create(null), { store: 'a' }),
      Object.assign(Object.create({ inherited: 1 }), { store: 'a' }), { store: 'a', [Symbol('s')]: 1 }, { store: ' ' },
    ];
    for (const p of payloads) expect(storePayload.safeParse(p), String(JSON.stringify(p))).toEqual(zod.safeParse(p));
  });

  it('the mem0 layout\'s defaults are mem0Schema\'s', () => {
    expect(MEM0_DEFAULTS).toEqual(mem0Schema.parse({}));
    expect(mem0Of({})).toEqual(mem0Schema.parse({}));
    const given = mem0Schema.parse({ collection: 'c', vectorStore: 'sqlite' });
    expect(mem0Of({ mem0: given })).toEqual(mem0Schema.parse(given));
  });

  it('the patterns validated without cron-parser are valid cron for it, and UTC is a time zone for Intl', () => {
    expect(DEFAULT_PATTERNS.size).toBeGreaterThan(0);
    for (const p of DEFAULT_PATTERNS) expect(() => CronExpressionParser.parse(p, { tz: 'UTC' }).next()).not.toThrow();
    expect(() => new Intl.DateTimeFormat('en', { timeZone: 'UTC' })).not.toThrow();
    expect(isTimeZone('UTC')).toBe(true);
    expect(isTimeZone('Nowhere/Else')).toBe(false);
  });
});

describe('the build\'s one-file bundles are the packages (scripts/vendor.ts)', () => {
  it('dist/src/vendor/zod.js exports what zod does, and validates as zod does', async () => {
    const zod = await import('zod');
    const bundled = (await import(join(DIST, 'src/vendor/zod.js'))) as typeof zod;
    expect(readFileSync(join(DIST, 'src/vendor/zod.js'), 'utf8').length).toBeGreaterThan(100_000); // bundled, not the re-export
    expect(Object.keys(bundled).sort()).toEqual(Object.keys(zod).filter((k) => k !== 'default').sort()); // `export *`: named only
    expect(bundled.config()).toMatchObject({ jitless: true }); // as src/vendor/zod.ts sets it; compared below with zod's JIT
    const schema = (z: typeof zod.z) => z.object({ a: z.number().int().positive(), b: z.enum(['x', 'y']).default('x'), c: z.array(z.string()).max(2) }).strict();
    for (const v of [{ a: 1, c: [] }, { a: -1, c: [] }, { a: 1.5, b: 'z', c: ['1', '2', '3'] }, { a: 1, c: [], d: 1 }, null, 'a']) {
      expect(schema(bundled.z).safeParse(v), JSON.stringify(v)).toEqual(schema(zod.z).safeParse(v));
    }
  });

  it('dist/src/vendor/yaml.cjs parses as yaml does, refusals included', () => {
    const bundled = createRequire(import.meta.url)(join(DIST, 'src/vendor/yaml.cjs')) as typeof YAML;
    expect(readFileSync(join(DIST, 'src/vendor/yaml.cjs'), 'utf8').length).toBeGreaterThan(100_000);
    const opts = { uniqueKeys: true, maxAliasCount: 100 };
    expect(bundled.parse(readFileSync(DEFAULT_CONFIG_PATH, 'utf8'), opts)).toEqual(YAML.parse(readFileSync(DEFAULT_CONFIG_PATH, 'utf8'), opts));
    const laughs = ['a: &a [x, x, x, x, x, x, x, x, x]', ...Array.from({ length: 8 }, (_, i) => `${'bcdefghi'[i]}: &${'bcdefghi'[i]} [${Array(9).fill(`*${'abcdefgh'[i]}`).join(', ')}]`)].join('\n');
    for (const text of ['a: 1\na: 2', laughs, 'a: [1, 2', 'k: "\\u00e9t\u00e9"']) {
      const outcome = (Y: typeof YAML) => {
        try {
          return { value: Y.parse(text, opts) as unknown };
        } catch (err) {
          return { error: (err as Error).message };
        }
      };
      expect(outcome(bundled), text.slice(0, 40)).toEqual(outcome(YAML));
    }
  });
});

describe('the built defaults give exactly the config the YAML gives', () => {
  const cachePath = join(DIST, 'src/default-config.json');
  beforeAll(() => {
    const gen = spawnSync(process.execPath, [join(DIST, 'scripts/config-defaults.js')], { encoding: 'utf8' });
    expect(gen.status, gen.stderr).toBe(0);
  });

  it('the cache holds default.yaml as parsed', () => {
    const cache = JSON.parse(readFileSync(cachePath, 'utf8')) as { value: unknown };
    expect(cache.value).toEqual(YAML.parse(readFileSync(DEFAULT_CONFIG_PATH, 'utf8')));
  });

  it('--db alone: the built loader (cache) and the source loader (YAML) agree, whatever the environment', async () => {
    const built = (await import(join(DIST, 'src/config/config.js'))) as { loadConfig: typeof loadConfig; DEFAULTS_CACHE_PATH: string };
    expect(built.DEFAULTS_CACHE_PATH).toBe(cachePath);
    const cases: LoadOptions[] = [
      { env: {}, overrides: { stores: { small: { db: '/tmp/small.db' } } } },
      { env: { HOME: '/home/a', MEMORY_WARDEN_STATE: '/var/lib/mw/state.db', REDIS_URL: 'redis://:pw@10.0.0.1:6380' }, overrides: { stores: { s: { db: 'rel/s.db' } } } },
      { env: { HOME: '/home/b', MEMORY_WARDEN_STATE: '', REDIS_URL: '' }, overrides: { stores: { x: { db: '${HOME}/x.db' } } } },
      { env: { HOME: '/h', SMTP_PASSWORD: 'p' }, overrides: undefined },
    ];
    for (const c of cases) expect(built.loadConfig(c)).toEqual(loadConfig(c));
  });

  it('--db alone, without zod: the build\'s validated defaults give exactly what zod gives, or defer to it', async () => {
    const read = (await import(join(DIST, 'src/config/read.js'))) as { quickConfig: typeof quickConfig };
    const quick: LoadOptions[] = [
      { env: {}, overrides: { stores: { small: { db: '/tmp/small.db' } } } },
      { env: {}, overrides: undefined },
      { env: { HOME: '/home/a', MEMORY_WARDEN_STATE: '/var/lib/mw/state.db', REDIS_URL: 'redis://:pw@10.0.0.1:6380' }, overrides: { stores: { s: { db: 'rel/s.db' } } } },
      { env: { HOME: '/home/b', MEMORY_WARDEN_STATE: '', REDIS_URL: '' }, overrides: { stores: { x: { db: '${HOME}/x.db' } } } },
      { env: { REDIS_URL: 'not a url at all' }, overrides: { stores: { a: { db: '/a.db' }, b: { db: '/b.db' } } } },
      { env: { HOME: '/h', SMTP_PASSWORD: 'p' }, overrides: undefined },
    ];
    for (const c of quick) {
      const got = read.quickConfig(c);
      expect(got, JSON.stringify(c)).toBeDefined();
      expect(JSON.stringify(got)).toBe(JSON.stringify(loadConfig(c))); // the same values, in the same key order
    }
    // What the rules do not cover goes to zod: a config file, other overrides, an empty path, a name zod refuses.
    const deferred: LoadOptions[] = [
      { env: {}, file: join(DIST, '../config/default.yaml') },
      { env: {}, overrides: { stores: { a: { db: '/a.db', layout: 'mem0' } } } },
      { env: {}, overrides: { stores: { a: { db: '' } } } },
      { env: { EMPTY: '' }, overrides: { stores: { a: { db: '${EMPTY:-}' } } } },
      { env: {}, overrides: { stores: { 'a b': { db: '/a.db' } } } },
      { env: {}, overrides: { stores: { a: { db: 1 } } } },
      { env: {}, overrides: { busyTimeoutMs: 1 } },
      { env: {}, overrides: { stores: { a: { db: '/a.db' } }, log: { level: 'warn' } } },
    ];
    for (const c of deferred) expect(read.quickConfig(c), JSON.stringify(c)).toBeUndefined();
    // An unset variable is the same error either way.
    const unset: LoadOptions = { env: {}, overrides: { stores: { x: { db: '${NOPE}/x.db' } } } };
    expect(() => read.quickConfig(unset)).toThrow(/environment variable NOPE is not set/);
    expect(() => loadConfig(unset)).toThrow(/environment variable NOPE is not set/);
  });

  it('a cache made by another build of the schema is not used', async () => {
    const good = readFileSync(cachePath, 'utf8');
    const cache = JSON.parse(good) as { quick: { sources: Record<string, string> } };
    expect(Object.keys(cache.quick.sources)).toEqual(expect.arrayContaining(['config/config.js', 'store/config.js', 'queue/config.js']));
    try {
      writeFileSync(cachePath, JSON.stringify({ ...cache, quick: { ...cache.quick, sources: { ...cache.quick.sources, 'store/config.js': '0'.repeat(64) } } }));
      const read = (await import(join(DIST, 'src/config/read.js'))) as { quickConfig: typeof quickConfig };
      expect(read.quickConfig({ env: {}, overrides: { stores: { a: { db: '/a.db' } } } })).toBeUndefined();
    } finally {
      writeFileSync(cachePath, good);
    }
  });

  it('a cache for another default.yaml is not used', async () => {
    const good = readFileSync(cachePath, 'utf8');
    const stale = JSON.parse(good) as { sha256: string; value: { busyTimeoutMs: number } };
    try {
      writeFileSync(cachePath, JSON.stringify({ sha256: '0'.repeat(64), value: { ...stale.value, busyTimeoutMs: 1 } }));
      const built = (await import(join(DIST, 'src/config/config.js'))) as { loadConfig: typeof loadConfig };
      expect(built.loadConfig({ env: {} }).busyTimeoutMs).toBe(loadConfig({ env: {} }).busyTimeoutMs);
      expect(built.loadConfig({ env: {} }).busyTimeoutMs).not.toBe(1);
    } finally {
      writeFileSync(cachePath, good);
    }
  });

  it('without a cache the YAML is parsed as before', async () => {
    const good = readFileSync(cachePath, 'utf8');
    try {
      rmSync(cachePath);
      const built = (await import(join(DIST, 'src/config/config.js'))) as { loadConfig: typeof loadConfig };
      expect(built.loadConfig({ env: {}, overrides: { stores: { a: { db: '/a.db' } } } })).toEqual(loadConfig({ env: {}, overrides: { stores: { a: { db: '/a.db' } } } }));
    } finally {
      writeFileSync(cachePath, good);
    }
  });
});
