import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createVerifyTask, type VerifyTaskPayload } from '../../src/drift/task.js';
import { WardenError } from '../../src/core/errors.js';
import { silentLogger } from '../../src/log/logger.js';
import type { TaskContext } from '../../src/queue/tasks.js';
import { freePort } from '../helpers/redis.js';
import { configFor, daysAgo, NOW, sandbox, type Sandbox } from './helpers.js';

/** The `verify` task on its own, as a worker runs it: what it accepts, what it reads, when it asks for a retry. */
describe('verify task', () => {
  let box: Sandbox;
  let root: string;
  let closedPort: number;
  beforeEach(async () => {
    box = sandbox();
    root = join(box.dir, 'configs');
    mkdirSync(root);
    writeFileSync(join(root, 'app.yaml'), 'database:\n  version: "15.4"\n');
    closedPort = await freePort();
  });
  afterEach(() => box.cleanup());

  const task = () =>
    createVerifyTask(
      configFor(box, {
        allow: { fileRoots: [root], httpHosts: ['127.0.0.1'] },
        rules: [
          { match: { source: '^file:(?<path>.+)$', fact: 'Postgres' }, use: 'file', with: { path: '${path}', select: '$.database.version', expect: '^15' } },
          { match: { source: '^status:', fact: 'Postgres' }, use: 'http', with: { url: `http://127.0.0.1:${closedPort}/`, read: 'status', expect: 200 } },
        ],
      }),
    );
  const ctx = (over: Partial<TaskContext> = {}): TaskContext => ({ log: silentLogger, signal: new AbortController().signal, attempt: 1, lastAttempt: false, ...over });
  const payload = (source: string, over: Partial<VerifyTaskPayload> = {}): VerifyTaskPayload => ({
    v: 1, run: 'r1', store: 'agent', rule: 0, verifier: 'file', now: NOW,
    memory: { id: 'm_1', subject: 'db', fact: 'the database is Postgres 15', source, confirmed_at: daysAgo(100) },
    ...over,
  });

  it('reads the source its rule names and returns what it read, fingerprinted; tasks of one run share a read', async () => {
    const t = task();
    const first = await t.run(payload('file:app.yaml'), ctx());
    expect(first).toMatchObject({ result: { value: '15.4', fingerprint: expect.stringMatching(/^sha256:/) }, reads: 1, sharedReads: 0 });
    const second = await t.run(payload('file:app.yaml', { memory: { ...payload('').memory, id: 'm_2', source: 'file:app.yaml' } }), ctx());
    expect(second).toMatchObject({ reads: 0, sharedReads: 1 });
    // another run reads again
    expect(await t.run(payload('file:app.yaml', { run: 'r2' }), ctx())).toMatchObject({ reads: 1 });
  });

  it('refuses a payload that is not one, and a rule that differs from the queuing worker config, for good', async () => {
    const t = task();
    const refusedWith = async (p: unknown, kind: string, message: RegExp) => {
      const err = await t.run(p, ctx()).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(WardenError);
      expect((err as WardenError).kind).toBe(kind);
      expect((err as WardenError).message).toMatch(message);
    };
    await refusedWith({ ...payload('file:app.yaml'), params: { path: '/etc/passwd' } }, 'usage', /verify task payload: .*params|unrecognized/i);
    await refusedWith({ ...payload('file:app.yaml'), memory: { id: 'm_1' } }, 'usage', /verify task payload: memory\./);
    await refusedWith(payload('file:app.yaml', { rule: 7 }), 'config', /rule 7 .* does not use "file"/);
    await refusedWith(payload('file:app.yaml', { rule: 1, verifier: 'file' }), 'config', /rule 1 .* does not use "file"/);
    await refusedWith(payload('status:up', { rule: 0 }), 'config', /does not match memory m_1/);
  });

  it('re-checks a hostile source itself: refused, nothing read', async () => {
    const r = await task().run(payload('file:app.yaml;rm -rf ~'), ctx());
    expect(r).toEqual({ result: { verdict: 'refused', reason: expect.stringMatching(/shell metacharacters/) }, reads: 0, sharedReads: 0 });
    const outside = await task().run(payload('file:../../etc/passwd'), ctx());
    expect(outside).toMatchObject({ result: { verdict: 'refused' } });
  });

  it('asks for a retry when the read failed transiently, and answers unverifiable on the last attempt', async () => {
    const t = task();
    const p = payload('status:up', { rule: 1, verifier: 'http' });
    const err = await t.run(p, ctx()).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(WardenError);
    expect((err as WardenError).transient).toBe(true);
    const last = await t.run(p, ctx({ attempt: 3, lastAttempt: true }));
    expect(last).toMatchObject({ result: { verdict: 'unverifiable', reason: expect.stringMatching(/fetch failed|ECONNREFUSED/) } });
  });
});
