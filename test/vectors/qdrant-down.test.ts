import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cli, cliAsync } from '../helpers/cli.js';
import { freePort } from '../helpers/redis.js';
import { makeStore, tempDir } from '../helpers/store.js';
import { coerceError } from '../../src/core/errors.js';

/**
 * Qdrant that does not answer: every command that asks it says where it asked and why there was no answer
 * (`connect ECONNREFUSED …`, `getaddrinfo ENOTFOUND …`), in one line, exit 2; never a bare `fetch failed`.
 */
describe('Qdrant down', () => {
  let dir: string;
  let cleanup: () => void;
  let port: number;
  beforeAll(async () => {
    ({ dir, cleanup } = tempDir('mw-qdrant-down-'));
    makeStore(join(dir, 'agent.db'), [{ id: 'm1' }]);
    port = await freePort(); // nothing listens there
  });
  afterAll(() => cleanup?.());

  const configFor = (url: string) => {
    const file = join(dir, `config-${encodeURIComponent(url)}.yaml`);
    writeFileSync(file, JSON.stringify({ stateDb: join(dir, 'state.db'), snapshot: { root: join(dir, 'snapshots') }, stores: { agent: { db: join(dir, 'agent.db'), qdrant: { url, collections: ['memories'] } } } }));
    return file;
  };

  it.each([
    ['check', ['check']],
    ['repair orphans', ['repair', 'orphans']],
    ['run snapshot', ['run', 'snapshot']],
  ])('%s names the URL and the cause: connection refused', (_name, args) => {
    const r = cli([...args, '--config', configFor(`http://127.0.0.1:${port}`), '--store', 'agent'], { MEMORY_WARDEN_CONFIG: '' });
    expect(r.code).toBe(2);
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(`no answer from http://127.0.0.1:${port} (connect ECONNREFUSED 127.0.0.1:${port})`);
    expect(r.stderr).not.toMatch(/fetch failed\s*$/m);
  });

  it('a host that does not resolve, and a URL from the environment: named, its password never', () => {
    const r = cli(['check', '--config', configFor('http://qdrant.invalid:6333'), '--store', 'agent'], { MEMORY_WARDEN_CONFIG: '' });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/no answer from http:\/\/qdrant\.invalid:6333 \(getaddrinfo (ENOTFOUND|EAI_AGAIN) qdrant\.invalid\)/);
    const env = cli(['check', '--config', configFor('${QDRANT_URL}'), '--store', 'agent'], { MEMORY_WARDEN_CONFIG: '', QDRANT_URL: `http://warden:Zq7QdrantPw9@127.0.0.1:${port}` });
    expect(env.code).toBe(2);
    expect(env.stderr).toContain(`no answer from http://127.0.0.1:${port} (connect ECONNREFUSED`);
    expect(env.stderr).not.toContain('Zq7QdrantPw9');
  });

  it('a Qdrant that takes the connection and never answers: the command says it waited timeoutMs, in one line, exit 2', async () => {
    const silent = createServer(() => {}); // takes every connection, answers none
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const at = (silent.address() as AddressInfo).port;
    try {
      const file = join(dir, 'config-silent.yaml');
      writeFileSync(file, JSON.stringify({ stateDb: join(dir, 'state.db'), stores: { agent: { db: join(dir, 'agent.db'), qdrant: { url: `http://127.0.0.1:${at}`, collections: ['memories'], timeoutMs: 300 } } } }));
      for (const args of [['check'], ['repair', 'orphans']]) {
        const r = await cliAsync([...args, '--config', file, '--store', 'agent'], { MEMORY_WARDEN_CONFIG: '' });
        expect(r.code, r.stderr).toBe(2);
        expect(r.stderr.trimEnd().split('\n')).toEqual([expect.stringContaining(`: no answer from http://127.0.0.1:${at} within 300 ms (qdrant.timeoutMs)`)]);
        expect(r.stderr).not.toContain('aborted');
      }
    } finally {
      silent.closeAllConnections();
      await new Promise((r) => silent.close(r));
    }
  });

  it('any other fetch that gets no answer carries its cause too', async () => {
    const err = await fetch(`http://127.0.0.1:${port}/`).catch((e: unknown) => e);
    const e = coerceError(err, 'read http://127.0.0.1');
    expect(e.message).toMatch(/^read http:\/\/127\.0\.0\.1: fetch failed \(connect ECONNREFUSED 127\.0\.0\.1:\d+\)$/);
    expect(e.transient).toBe(true);
  });
});
