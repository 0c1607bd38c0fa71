import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { COMMAND_DETAILS } from '../src/commands/details.js';
import { cli } from './helpers/cli.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from './helpers/redis.js';
import { makeStore, tempDir } from './helpers/store.js';

/**
 * The README sends a reader to docs/commands.md for "every option and JSON key": where a command's details list its
 * JSON keys, every key its `--json` prints is among them (a key a script meets should be one it can look up).
 */
const documented = (words: string) => new Set([...COMMAND_DETAILS[words]!.matchAll(/`(\w+)`/g)].map((m) => m[1]!));
const undocumented = (words: string, out: Record<string, unknown>) => Object.keys(out).filter((k) => !documented(words).has(k));

describe('JSON keys of docs/commands.md', () => {
  let dir: string;
  let cleanup: () => void;
  let store: string;
  let redis: TestRedis;
  const prefix = uniquePrefix('json-keys');
  beforeAll(async () => {
    ({ dir, cleanup } = tempDir());
    store = makeStore(join(dir, 'm.db'), [
      { id: 'a', expires_at: '2000-01-01 00:00:00' },
      { id: 'b', created_at: '2026-01-01T00:00:00+01:00' },
    ]);
    redis = await startTestRedis();
  });
  afterAll(async () => {
    await deletePrefix(redis.client, prefix);
    await redis.stop();
    cleanup();
  });

  it.each([
    ['check', ['check']],
    ['run prune', ['run', 'prune', '--dry-run']],
    ['run prune', ['run', 'prune']],
    ['repair dangling', ['repair', 'dangling']],
    ['repair timestamps', ['repair', 'timestamps']],
  ])('%s: every key it prints is listed', (words, argv) => {
    const r = cli([...argv, '--db', store, '--json'], { MEMORY_WARDEN_STATE: join(dir, 'state.db') });
    expect(r.code, r.stderr).toBeLessThanOrEqual(1);
    expect(undocumented(words, r.json())).toEqual([]);
  });

  it('fleet: every key it prints is listed, and those of each host', () => {
    const config = join(dir, 'fleet.yaml');
    writeFileSync(config, `redis: { url: "${redis.url}", prefix: "${prefix}" }\nstateDb: ${join(dir, 'state.db')}\nstores:\n  m: { db: ${store}, host: box-a }\n`);
    const r = cli(['fleet', '--config', config, '--json']);
    expect(r.code, r.stderr).toBe(1); // box-a: never seen
    const out = r.json<{ hosts: Record<string, unknown>[] }>();
    expect(undocumented('fleet', out)).toEqual([]);
    expect(out.hosts.length).toBe(1);
    expect(undocumented('fleet', out.hosts[0]!)).toEqual([]);
  });
});
