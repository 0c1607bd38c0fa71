import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { verifyAll, type DispatchOptions } from '../../src/drift/dispatch.js';
import { applyDecision } from '../../src/layouts/warden/apply.js';
import { defineVerifier } from '../../src/verifiers/define.js';
import { createRegistry } from '../../src/verifiers/registry.js';
import { compileRules } from '../../src/verifiers/rules.js';
import { verifySchema } from '../../src/verifiers/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { openStateDb } from '../../src/state/state.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { verdictLog, verdictsFor } from '../../src/drift/record.js';
import type { MemoryUnderReview } from '../../src/verifiers/types.js';
import { daysAgo, insertRows, NOW, row, sandbox, type Sandbox } from './helpers.js';

const memories = (n: number, source = 'probe:x'): MemoryUnderReview[] =>
  Array.from({ length: n }, (_, i) => ({ id: `m_${i}`, subject: 's', fact: 'f', source, confirmed_at: daysAgo(100) }));

function options(verifier: NonNullable<Parameters<typeof createRegistry>[0]>[number]['verifier'], extra: Partial<DispatchOptions> = {}): DispatchOptions {
  const rules = compileRules(verifySchema.parse({ rules: [{ match: { source: '^probe:', fact: '^f$' }, use: verifier.name, with: { expect: 'yes' } }] }), {});
  return {
    rules,
    registry: createRegistry([{ file: 'test', verifier }]),
    concurrency: 3,
    timeoutMs: 5000,
    allow: { fileRoots: [], gitRepos: [], httpHosts: [] },
    cacheDir: '.',
    log: silentLogger,
    now: NOW,
    signal: new AbortController().signal,
    accepted: () => undefined,
    ...extra,
  };
}

describe('dispatch', () => {
  it('never runs more than verify.concurrency verifications at once', async () => {
    let running = 0;
    let most = 0;
    const probe = defineVerifier({
      name: 'probe',
      async verify() {
        running += 1;
        most = Math.max(most, running);
        await new Promise((r) => setImmediate(r));
        running -= 1;
        return { value: 'yes' };
      },
    });
    const r = await verifyAll(memories(10), options(probe));
    expect(r.decisions.map((d) => d.verdict)).toEqual(Array(10).fill('confirmed'));
    expect(most).toBe(3);
  });

  it('a stopped run starts nothing new and records nothing for the verification it cut short', async () => {
    const stop = new AbortController();
    let started = 0;
    const probe = defineVerifier({
      name: 'probe',
      async verify(task) {
        started += 1;
        if (task.memory.id === 'm_1') {
          stop.abort();
          return new Promise(() => {}); // ignores its signal: the stop still ends it
        }
        return { value: 'yes' };
      },
    });
    const r = await verifyAll(memories(6), options(probe, { concurrency: 1, signal: stop.signal }));
    expect(r.decisions.map((d) => d.memory.id)).toEqual(['m_0']);
    expect(started).toBe(2);
  });
});

describe('applying a verdict', () => {
  let box: Sandbox;
  beforeEach(() => {
    box = sandbox();
  });
  afterEach(() => box.cleanup());

  it('writes nothing to a row the agent rewrote while it was being verified', async () => {
    insertRows(box.dbPath, [{ id: 'm_0', subject: 's', fact: 'f', source: 'probe:x', confirmed_at: daysAgo(100) }]);
    const probe = defineVerifier({
      name: 'probe',
      async verify() {
        const agent = openDatabase(box.dbPath);
        agent.prepare(`UPDATE memory SET fact = 'f, corrected by the agent' WHERE id = 'm_0'`).run();
        agent.close();
        return { value: 'yes' };
      },
    });
    const [decision] = (await verifyAll(memories(1), options(probe))).decisions;
    expect(decision!.verdict).toBe('confirmed');
    const db = openDatabase(box.dbPath);
    const state = openStateDb(box.statePath);
    try {
      const applied = applyDecision(db, verdictLog(state), 'agent', decision!, NOW);
      expect(applied).toMatchObject({ verdict: 'unverifiable', skipped: 'the row was rewritten while it was being verified' });
      expect(verdictsFor(state, 'agent', 'm_0')).toHaveLength(1);
    } finally {
      db.close();
      state.close();
    }
    expect(row(box.dbPath, 'm_0')!.confirmed_at).toBe(daysAgo(100));
  });
});
