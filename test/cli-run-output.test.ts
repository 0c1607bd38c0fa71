import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cli } from './helpers/cli.js';
import { makeStore, tempDir } from './helpers/store.js';

/** `run <job>` prints lines for a person, and JSON only with --json, for every job, as every other command does. */
describe('what run prints', () => {
  let dir: string;
  let cleanup: () => void;
  let config: string;
  beforeAll(() => {
    ({ dir, cleanup } = tempDir('mw-run-output-'));
    makeStore(join(dir, 'agent.db'), [{ id: 'm1', confirmed_at: '2020-01-01 00:00:00' }, { id: 'old', expires_at: '2000-01-01 00:00:00' }]);
    config = join(dir, 'config.yaml');
    writeFileSync(config, JSON.stringify({ stateDb: join(dir, 'state.db'), snapshot: { root: join(dir, 'snapshots') }, stores: { agent: { db: join(dir, 'agent.db') } } }));
  });
  afterAll(() => cleanup?.());

  const notJson = (text: string) => expect(() => JSON.parse(text)).toThrow();

  it.each([
    ['snapshot', /^agent: snapshot \S+ in .*snapshots.*: rows 2, \d+ bytes$/m, { store: 'agent', rows: 2 }],
    ['drift', /^agent: drift as of .*: 1 due, .* 1 to a person/m, { store: 'agent', toPerson: 0 }],
    ['integrity', /^agent \(.*agent\.db\): healthy$/m, { ok: true }],
    ['prune', /^agent: deleted 1 row\(s\)/m, { deleted: 0 }],
  ])('run %s: a person\'s lines without --json, one JSON object with it', (job, human, json) => {
    // Two runs, an hour apart (one snapshot per store and second).
    const text = cli(['run', job, '--config', config, '--store', 'agent', '--now', '2026-11-29T02:00:00Z'], { MEMORY_WARDEN_CONFIG: '' });
    expect(text.code, text.stderr).toBe(0);
    notJson(text.stdout);
    expect(text.stdout).toMatch(human);
    expect(text.stdout).not.toMatch(/^\s*[{}]/m);
    const j = cli(['run', job, '--config', config, '--store', 'agent', '--now', '2026-11-29T03:00:00Z', '--json'], { MEMORY_WARDEN_CONFIG: '' });
    expect(j.code, j.stderr).toBe(0);
    expect(j.json()).toMatchObject(json);
  });
});
