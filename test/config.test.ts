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
    expect(config.prune).toMatchObject({ supersededAfterDays: 30, batchSize: 10000, expired: true });
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
