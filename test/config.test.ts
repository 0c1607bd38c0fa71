import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig, expandEnv } from '../src/config.js';
import { tempDir } from './helpers/store.js';
import { cli } from './helpers/cli.js';

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
