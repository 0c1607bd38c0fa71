import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cli } from './helpers/cli.js';
import { makeStore, tempDir } from './helpers/store.js';
import { configSchema } from '../src/config/config.js';
import { knownKeys, nearestKey } from '../src/config/suggest.js';

/** A misspelled key, anywhere in a config: one line naming the field, with the key it likely meant, exit 2. */
describe('a misspelled config key', () => {
  let dir: string;
  let cleanup: () => void;
  let db: string;
  beforeAll(() => {
    ({ dir, cleanup } = tempDir('mw-suggest-'));
    db = makeStore(join(dir, 'agent.db'));
  });
  afterAll(() => cleanup?.());

  it.each([
    ['top level', (db: string) => `stateDb: ./state.db\nstores:\n  agent: { db: ${db} }\nsnapshots: { root: ./b }\n`, '(root): Unrecognized key: "snapshots" (did you mean "snapshot"?)'],
    ['a letter\'s case', (db: string) => `stateDb: ./state.db\nworker: { heartbeatMS: 100 }\nstores:\n  agent: { db: ${db} }\n`, 'worker: Unrecognized key: "heartbeatMS" (did you mean "heartbeatMs"?)'],
    ['a store\'s db, so db is missing too', (db: string) => `stateDb: ./state.db\nstores:\n  agent: { dbb: ${db} }\n`, 'stores.agent: Unrecognized key: "dbb" (did you mean "db"?)'],
    ['two letters swapped, deep', (db: string) => `stateDb: ./state.db\nstores:\n  agent: { db: ${db}, qdrant: { url: "http://127.0.0.1:6333", colletcions: [m] } }\n`, 'stores.agent.qdrant: Unrecognized key: "colletcions" (did you mean "collections"?)'],
    ['in a list item', (db: string) => `stateDb: ./state.db\nstores:\n  agent: { db: ${db} }\nverify:\n  rules:\n    - { match: { source: "^x" }, use: file, wth: {} }\n`, 'Unrecognized key: "wth" (did you mean "with"?)'],
    ['nothing near: the key alone', (db: string) => `stateDb: ./state.db\nstores:\n  agent: { db: ${db} }\nzzzzzz: 1\n`, '(root): Unrecognized key: "zzzzzz" (zzzzzz)'],
  ])('%s', (_name, yaml, said) => {
    const file = join(dir, `c-${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(file, yaml(db));
    const r = cli(['check', '--config', file], { MEMORY_WARDEN_CONFIG: '' });
    expect(r.code).toBe(2);
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(said);
  });

  it('the known keys come from the schema at that place; far keys are no suggestion', () => {
    expect(knownKeys(configSchema, ['stores', 'any'])).toEqual(expect.arrayContaining(['db', 'layout', 'qdrant', 'host']));
    expect(knownKeys(configSchema, ['worker'])).toContain('heartbeatMs');
    expect(nearestKey('db', ['layout', 'host'])).toBeUndefined();
    expect(nearestKey('prnue', ['prune', 'snapshot'])).toBe('prune');
  });
});
