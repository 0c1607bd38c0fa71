import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openDatabase } from '../../src/store/sqlite.js';
import { CLI, countRows, makeStore, redisDump, spawnWorker, tempDir, useWorkerProcesses } from './fixtures.js';
import { fileBytes, guessList, guessedIn, unkeyedDigests, type Person } from '../helpers/guesses.js';

const exec = promisify(execFile);
const DANA: Person = { email: 'dana.okafor@example.org', name: 'Dana Okafor', ids: ['m_0301', 'm_0302'] };
const DIGESTS = unkeyedDigests(guessList(DANA));

/**
 * An erase of a store on another host goes through Redis: the request to that host's worker, and the receipt back
 * (BullMQ keeps a job's return value in its queue's event stream after the job itself is gone). Once it is done,
 * nothing under the fleet's prefix names the person or holds a digest a list of guesses matches; the receipt the
 * requester prints is keyed under the erasing host's key; that host's state db matches no guess either.
 */
describe('a cross-host erase carries nothing unkeyed', { timeout: 120_000 }, () => {
  const { redis: r, workers, prefix: prefixFor } = useWorkerProcesses();

  it.each([
    ['--user', ['--user', DANA.email]],
    ['--subject', ['--subject', DANA.name]],
    ['--ids', ['--ids', ...DANA.ids]],
  ])('%s: Redis afterwards, the printed receipt and the erasing host\'s state db match no guess', async (name, selector) => {
    const redis = r();
    const dir = tempDir(`keyed${name}`);
    const prefix = prefixFor(`keyed${name}`);
    for (const h of ['a', 'b']) mkdirSync(join(dir, h));
    const db = makeStore(join(dir, 'b', 'b1.db'), { live: 1 });
    const w = openDatabase(db);
    for (const id of DANA.ids) w.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES (?, ?, 'Dana Okafor moves to Accra', 'message')`).run(id, DANA.email);
    w.close();
    const off = { enabled: false };
    const file = join(dir, 'fleet.yaml');
    writeFileSync(file, JSON.stringify({
      stateDb: '${STATE_DIR}/state.db',
      redis: { url: redis.url, prefix },
      worker: { http: { port: 0 }, heartbeatMs: 200, schedules: { prune: off, integrity: off, snapshot: off, digest: off, drift: off } },
      stores: { b1: { db, host: 'b' }, a1: { db: makeStore(join(dir, 'a', 'a1.db')), host: 'a' } },
    }));
    const b = spawnWorker(file, ['worker', '--host', 'b'], { STATE_DIR: join(dir, 'b') });
    workers.push(b);
    await b.ready;

    const env = { ...process.env, REDIS_URL: '', STATE_DIR: join(dir, 'a'), MEMORY_WARDEN_HOST: 'a', LOG_LEVEL: 'info' };
    const text = await exec(process.execPath, [CLI, 'erase', '--store', 'b1', ...selector, '--config', file], { env });
    expect(text.stdout).toMatch(/erased 2 memory\(ies\) selected by \w+ \(HMAC [0-9a-f]{16}…\)/);
    expect(countRows(db, `subject = '${DANA.email}'`)).toBe(0);
    const json = await exec(process.execPath, [CLI, 'erase', '--store', 'b1', ...selector, '--json', '--config', file], { env });
    expect(JSON.parse(json.stdout)).toMatchObject({ store: 'b1', memories: 0, keyId: expect.stringMatching(/^[0-9a-f]{16}$/) });

    const dump = await redisDump(redis.client, prefix);
    const seen: [string, string | Buffer][] = [
      ...[...dump].map(([k, v]) => [`redis ${k}`, `${k} ${v}`] as [string, string]),
      ['erase stdout', text.stdout], ['erase stderr', text.stderr], ['erase --json', json.stdout], ['erase --json stderr', json.stderr],
      ['b\'s state db', fileBytes(join(dir, 'b', 'state.db'))], ['b\'s log', b.stderr()],
    ];
    expect([...dump.keys()].some((k) => k.endsWith(':events'))).toBe(true); // the stream that carried the receipts back
    for (const [where, what] of seen) {
      expect(guessedIn(what, DIGESTS), where).toEqual([]);
      const plain = (typeof what === 'string' ? what : what.toString('latin1')).toLowerCase();
      for (const p of [DANA.email, DANA.name, ...DANA.ids]) expect(plain.includes(p.toLowerCase()), `${where}: ${p}`).toBe(false);
    }
  });
});
