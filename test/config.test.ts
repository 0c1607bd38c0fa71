import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig, expandEnv } from '../src/config/config.js';
import { tempDir } from './helpers/store.js';
import { cli } from './helpers/cli.js';
import { busyTimeoutMs, openDatabase } from '../src/store/sqlite.js';

describe('config', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('layers defaults, the user file and the environment', () => {
    const file = join(dir, 'w.yaml');
    writeFileSync(file, 'prune:\n  supersededAfterDays: 30\nstores:\n  agent:\n    db: ./agent.db\nsmtp:\n  host: mail\n  password: ${SMTP_PASSWORD}\n');
    const config = loadConfig({ file, env: { SMTP_PASSWORD: 'hunter2', HOME: dir } });
    expect(config.prune).toMatchObject({ supersededAfterDays: 30, batchSize: 300000, expired: true });
    expect(config.stores.agent!.db).toBe(join(dir, 'agent.db'));
    expect(config.smtp!.password).toBe('hunter2');
    expect(config.review).toMatchObject({ afterDays: 90, batch: 20, tokenDays: 7, auth: { mode: 'password' } });
  });

  it('names the field whose environment variable is missing', () => {
    expect(() => expandEnv({ smtp: { password: '${NOPE_NOT_SET}' } }, {})).toThrow('config smtp.password: environment variable NOPE_NOT_SET is not set');
    expect(expandEnv({ a: '${X:-fallback}' }, {})).toEqual({ a: 'fallback' });
  });

  it('rejects unknown and mistyped fields with their path', () => {
    const file = join(dir, 'w.yaml');
    writeFileSync(file, 'prune:\n  supersededAfterDay: 30\n');
    expect(() => loadConfig({ file })).toThrow(/prune: Unrecognized key.*supersededAfterDay/);
    writeFileSync(file, 'stores:\n  agent:\n    db: 42\n');
    expect(() => loadConfig({ file })).toThrow(/stores\.agent\.db: .*expected string/);
  });

  it('prints the effective config with secrets blanked, URL passwords included', () => {
    const file = join(dir, 'w.yaml');
    writeFileSync(file, 'smtp:\n  host: mail\n  password: ${SMTP_PASSWORD}\n');
    const r = cli(['config', '--config', file], { SMTP_PASSWORD: 'hunter2', REDIS_URL: 'redis://:s3cret@127.0.0.1:6379' });
    expect(r.code).toBe(0);
    expect(r.stdout).not.toMatch(/hunter2|s3cret/);
    expect(r.json().smtp.password).toBe('[redacted]');
  });
});

describe('hostile config files: refused with the file and the key path, exit 2', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const refused: [string, string, RegExp][] = [
    ['an alias cycle in a sequence', 'a: &a [1, *a]\n', /a\.1: an alias that contains itself/],
    ['an alias cycle in a mapping', 'stores: &s\n  x:\n    db: /x.db\n    again: *s\n', /stores\.x\.again: an alias that contains itself/],
    ['a billion laughs', ['a: &a [x, x, x, x, x, x, x, x, x]', ...'bcdefg'.split('').map((c, i) => `${c}: &${c} [${Array(9).fill(`*${'abcdefg'[i]}`).join(', ')}]`)].join('\n') + '\n', /not valid YAML: Excessive alias count/],
    ['__proto__ at the top', '__proto__:\n  busyTimeoutMs: 1\n', /: __proto__: key "__proto__" refused/],
    ['__proto__ deep in a store', 'stores:\n  a:\n    db: /a.db\n    __proto__: { layout: mem0 }\n', /stores\.a\.__proto__: key "__proto__" refused/],
    ['constructor in prune', 'prune:\n  constructor: { name: x }\n', /prune\.constructor: key "constructor" refused/],
    ['prototype in a list item', 'digest:\n  to:\n    - { prototype: 1 }\n', /digest\.to\.0\.prototype: key "prototype" refused/],
    ['a duplicate key', 'prune:\n  batchSize: 1\n  batchSize: 2\n', /not valid YAML: Map keys must be unique/],
    ['a cron field out of range', 'worker:\n  schedules:\n    prune: { pattern: "61 2 * * *" }\n', /worker\.schedules\.prune\.pattern: not a cron pattern/],
    ['a day that never comes', 'worker:\n  schedules:\n    snapshot: { pattern: "0 0 31 2 *" }\n', /worker\.schedules\.snapshot\.pattern: not a cron pattern/],
    ['cron nonsense', 'worker:\n  schedules:\n    integrity: { pattern: "every day at noon" }\n', /worker\.schedules\.integrity\.pattern: not a cron pattern/],
    ['too many cron fields', 'worker:\n  schedules:\n    drift: { pattern: "0 0 9 * * 1 2026" }\n', /worker\.schedules\.drift\.pattern: not a cron pattern/],
    ['a schedule time zone that does not exist', 'worker:\n  schedules:\n    digest: { pattern: "0 7 * * *", tz: Mars/Olympus }\n', /worker\.schedules\.digest\.tz: not a time zone/],
    ['an offset is not a zone', 'worker:\n  schedules:\n    digest: { pattern: "0 7 * * *", tz: "+02:00" }\n', /worker\.schedules\.digest\.tz: not a time zone/],
    ['a worker time zone that does not exist', 'worker:\n  timezone: Europe/Atlantis\n', /worker\.timezone: not a time zone/],
  ];

  it.each(refused)('%s', (_, yaml, message) => {
    const file = join(dir, 'w.yaml');
    writeFileSync(file, yaml);
    expect(() => loadConfig({ file, env: {} })).toThrow(message);
    let thrown: Error | undefined;
    try {
      loadConfig({ file, env: {} });
    } catch (err) {
      thrown = err as Error;
    }
    expect(thrown!.message).toContain(`config ${file}: `);
    expect(thrown!.message).not.toContain('\n');
    expect(Object.prototype).not.toHaveProperty('busyTimeoutMs');
  });

  // A duration that becomes a timer: Node's fire after 1 ms past 2^31-1 ms, and SQLite's busy_timeout wraps around
  // to none, so "wait a month" meant "do not wait". Each is refused past the limit and accepted at it.
  const over = 2 ** 31;
  const timers: [string, (n: number) => string, RegExp][] = [
    ['busyTimeoutMs', (n) => `busyTimeoutMs: ${n}\n`, /: busyTimeoutMs: at most 2147483647 ms/],
    ['worker.heartbeatMs', (n) => `worker:\n  heartbeatMs: ${n}\n`, /worker\.heartbeatMs: at most 2147483647 ms/],
    ['worker.shutdownTimeoutMs', (n) => `worker:\n  shutdownTimeoutMs: ${n}\n`, /worker\.shutdownTimeoutMs: at most/],
    ['worker.lockDurationMs', (n) => `worker:\n  lockDurationMs: ${n}\n`, /worker\.lockDurationMs: at most/],
    ['worker.stalledIntervalMs', (n) => `worker:\n  stalledIntervalMs: ${n}\n`, /worker\.stalledIntervalMs: at most/],
    ['worker.storeLock.ttlMs', (n) => `worker:\n  storeLock:\n    ttlMs: ${n}\n`, /worker\.storeLock\.ttlMs: at most/],
    ['verify.timeoutMs', (n) => `verify:\n  timeoutMs: ${n}\n`, /verify\.timeoutMs: at most/],
    ['a verify rule\'s timeoutMs', (n) => `verify:\n  rules:\n    - { match: { source: "^f:" }, use: file, with: { path: x }, timeoutMs: ${n} }\n`, /verify\.rules\.0\.timeoutMs: at most/],
    ['smtp.timeoutMs', (n) => `smtp:\n  host: mail\n  timeoutMs: ${n}\n`, /smtp\.timeoutMs: at most/],
    ['digest.hostTimeoutSeconds', (n) => `digest:\n  hostTimeoutSeconds: ${Math.floor(n / 1000)}\n`, /digest\.hostTimeoutSeconds: at most 2147483 seconds/],
    ['an sftp target\'s timeoutMs', (n) => `snapshot:\n  targets:\n    - { name: box, type: sftp, host: h, username: u, hostKeySha256: "SHA256:${'A'.repeat(43)}", privateKeyFile: /k, path: b, timeoutMs: ${n} }\n`, /snapshot\.targets\.0\.timeoutMs: at most/],
    ['an s3 target\'s timeoutMs', (n) => `snapshot:\n  targets:\n    - { name: s3, type: s3, bucket: b, timeoutMs: ${n} }\n`, /snapshot\.targets\.0\.timeoutMs: at most/],
    ['a store\'s Qdrant timeoutMs', (n) => `stores:\n  a:\n    db: /a.db\n    qdrant: { url: "http://127.0.0.1:6333", collections: [m], timeoutMs: ${n} }\n`, /stores\.a\.qdrant\.timeoutMs: at most/],
  ];

  it.each(timers)('%s: refused past the longest timer, accepted at it', (_, yaml, message) => {
    const file = join(dir, 'w.yaml');
    writeFileSync(file, yaml(over + 1000));
    expect(() => loadConfig({ file, env: {} })).toThrow(message);
    writeFileSync(file, yaml(over + 1000).replace(String(over + 1000), '1e15').replace(String(Math.floor((over + 1000) / 1000)), '1e15'));
    expect(() => loadConfig({ file, env: {} })).toThrow(message);
    writeFileSync(file, yaml(over - 1));
    expect(() => loadConfig({ file, env: {} })).not.toThrow();
  });

  it('a busy timeout at the limit is the busy timeout the store gets, not none', () => {
    const file = join(dir, 'w.yaml');
    writeFileSync(file, `busyTimeoutMs: ${over - 1}\n`);
    expect(loadConfig({ file, env: {} }).busyTimeoutMs).toBe(over - 1);
    const db = openDatabase(join(dir, 'm.db'), { busyTimeoutMs: over + 5, create: true }); // past it (a caller without config): the most SQLite takes
    expect(busyTimeoutMs(db)).toBe(over - 1);
    db.close();
  });

  it('enqueue --timeout past the longest timer: one line, exit 2, before anything connects', () => {
    for (const t of ['2147484', '1e12']) {
      const r = cli(['enqueue', 'prune', '--timeout', t], { REDIS_URL: 'redis://127.0.0.1:1' });
      expect(r.code).toBe(2);
      expect(r.stderr.trim()).toBe('memory-warden: --timeout: at most 2147483 seconds (about 24.8 days), the longest wait a timer holds');
    }
  });

  it('config and schedule exit 2 with one line naming the schedule', () => {
    const file = join(dir, 'w.yaml');
    writeFileSync(file, 'worker:\n  schedules:\n    prune: { pattern: "30 25 * * *" }\n');
    for (const args of [['config', '--config', file], ['schedule', '--config', file]]) {
      const r = cli(args, { MEMORY_WARDEN_STATE: join(dir, 'state.db') });
      expect(r.code, args[0]).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(new RegExp(`config .*w\\.yaml: worker\\.schedules\\.prune\\.pattern: not a cron pattern`));
    }
  });

  it('accepts valid zones and patterns, seconds included', () => {
    const file = join(dir, 'w.yaml');
    writeFileSync(file, 'worker:\n  timezone: Europe/Rome\n  schedules:\n    prune: { pattern: "*/30 * * * * *", tz: America/New_York }\n    digest: { pattern: "0 7 * * 1-5", tz: UTC }\n');
    const config = loadConfig({ file, env: {} });
    expect(config.worker.schedules.prune!.tz).toBe('America/New_York');
  });
});
