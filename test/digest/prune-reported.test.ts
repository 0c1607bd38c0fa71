import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { cliAsync } from '../helpers/cli.js';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { makeStore, tempDir } from '../helpers/store.js';
import { loadConfig } from '../../src/config/config.js';
import { runDigest } from '../../src/digest/digest.js';
import { silentLogger } from '../../src/log/logger.js';
import { openStateDb, recordRunEnd, recordRunStart } from '../../src/state/state.js';

/**
 * A prune and then, a moment later, the digest (as a person runs them, or the worker's 02:30 prune before a digest
 * sent by hand): the digest reports that prune, and the next digest does not report it again.
 */
let smtp: TestSmtp;
let tmp: { dir: string; cleanup: () => void };
let config: string;

beforeEach(async () => {
  smtp = await startSmtp();
  tmp = tempDir('mw-digest-prune-');
  makeStore(join(tmp.dir, 'agent.db'), [
    { id: 'gone1', expires_at: '2000-01-01 00:00:00' },
    { id: 'gone2', expires_at: '2000-01-01 00:00:00' },
    { id: 'kept' },
  ]);
  config = join(tmp.dir, 'warden.yaml');
  writeFileSync(config, YAML.stringify({ stateDb: 'state.db', stores: { agent: { db: 'agent.db' } }, smtp: smtp.config(), digest: { to: ['owner@example.org'] } }));
});
afterEach(async () => {
  await smtp.close();
  tmp.cleanup();
});

const run = (args: string[]) => cliAsync([...args, '--config', config], { MEMORY_WARDEN_CONFIG: '' });

describe('the digest after a prune', () => {
  it('reports the prune that ran a moment before it, and the next digest does not report it again', async () => {
    const prune = await run(['run', 'prune', '--store', 'agent']);
    expect(prune.code, prune.stderr).toBe(0);
    const preview = await run(['digest', '--preview']);
    expect(preview.stdout).toMatch(/prune: deleted 2 row\(s\) in 1 run/);
    const sent = await run(['digest', '--send']);
    expect(sent.code, sent.stderr).toBe(0);
    expect(smtp.received).toHaveLength(1);
    const text = smtp.received[0]!.parsed.text ?? '';
    expect(text).toMatch(/prune: deleted 2 row\(s\) in 1 run/);
    expect(text).not.toContain('no prune ran in this period');
    // The next day's digest: its window starts where this one's ended.
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString();
    const next = await run(['digest', '--send', '--now', tomorrow]);
    expect(next.code, next.stderr).toBe(0);
    expect(smtp.received).toHaveLength(2);
    expect(smtp.received[1]!.parsed.text ?? '').toContain('no prune ran in this period');
  });

  it('reports a prune recorded in the very second the digest is made (runs are recorded to the second)', async () => {
    const cfg = loadConfig({ file: config, env: { ...process.env, MEMORY_WARDEN_CONFIG: '' } });
    // A whole second ahead, so that the prune and the digest fall in the same one.
    await new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000) + 5));
    const state = openStateDb(cfg.stateDb);
    const id = recordRunStart(state, 'prune', 'agent', Date.now());
    recordRunEnd(state, id, Date.now(), 'ok', { deleted: 3, expired: 3, superseded: 0, cascaded: 0 });
    state.close();
    const result = await runDigest({}, { config: cfg, log: silentLogger, now: () => Date.now(), signal: new AbortController().signal });
    expect(result.deliveries.map((d) => d.status)).toEqual(['sent']);
    expect(smtp.received[0]!.parsed.text ?? '').toMatch(/prune: deleted 3 row\(s\) in 1 run/);
  });
});
