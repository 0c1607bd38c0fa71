import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { qdrantTarget, type QdrantTarget } from '../helpers/qdrant-server.js';
import { tempDir } from '../helpers/store.js';
import { Mem0Fixture } from '../layouts/mem0-fixture.js';
import { drift } from '../../jobs/drift.js';
import { verifySchema } from '../../src/verifiers/config.js';
import { pendingItems } from '../../src/drift/record.js';
import { pyIsoUtc } from '../../src/layouts/mem0/memories.js';
import { jobContext, withState } from './helpers.js';
import { openStore } from '../../src/layouts/open.js';
import { openStateDb } from '../../src/state/state.js';
import { confirmMemory, listReview } from '../../src/drift/review.js';

const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);
const DAY = 86_400_000;

/** Drift on a mem0 deployment as mem0 writes it: confirm sets updated_at, contradictions go to a person. */
describe('drift on a mem0 store', () => {
  let q: QdrantTarget;
  let tmp: { dir: string; cleanup: () => void };
  let fx: Mem0Fixture;
  beforeEach(async () => {
    q = await qdrantTarget();
    tmp = tempDir('mw-drift-mem0-');
  });
  afterEach(async () => {
    fx?.close();
    q.assertConforms();
    await q.close();
    tmp.cleanup();
  });

  it('confirms through updated_at, leaves the supersede to a person, and sends unmatched memories to the human queue', async () => {
    fx = await Mem0Fixture.create(q, tmp.dir, 'python');
    const root = join(tmp.dir, 'facts');
    mkdirSync(root);
    writeFileSync(join(root, 'erin.json'), JSON.stringify({ db: '15.2' }));
    writeFileSync(join(root, 'sam.json'), JSON.stringify({ db: '16.1' }));
    const erin = await fx.add('The database is Postgres 15', { user_id: 'erin', actor_id: 'erin', role: 'user', at: NOW - 200 * DAY });
    const sam = await fx.add('The database is Postgres 15', { user_id: 'sam', actor_id: 'sam', role: 'user', at: NOW - 150 * DAY });
    const quiet = await fx.add('Prefers tea', { user_id: 'kim', at: NOW - 120 * DAY });
    await fx.add('Fresh', { user_id: 'erin', actor_id: 'erin', role: 'user', at: NOW - DAY });
    const base = fx.config();
    const config = {
      ...base,
      verify: verifySchema.parse({
        cacheDir: join(tmp.dir, 'cache'),
        allow: { fileRoots: [root] },
        rules: [
          {
            match: { source: '^role:user actor:(?<actor>[a-z]+)$', fact: 'Postgres' },
            use: 'file',
            with: { path: '${actor}.json', select: '$.db', expect: '^15' },
            replacement: 'The database is Postgres ${value}',
            autoSupersede: true,
          },
        ],
      }),
    };
    const history = fx.historyRows().length;
    const r = await drift({ store: 'm' }, jobContext(config, NOW));
    const byId = Object.fromEntries(r.verdicts.map((v) => [v.id, v]));
    expect(r.due).toBe(3);
    expect(byId[erin]).toMatchObject({ verdict: 'confirmed', needsPerson: false });
    expect(byId[sam]).toMatchObject({ verdict: 'contradicted', needsPerson: true });
    expect(byId[sam]!.supersededBy).toBeUndefined();
    expect(byId[quiet]).toMatchObject({ verdict: 'unverifiable', verifier: null, needsPerson: true });
    const points = Object.fromEntries((await fx.points()).map((p) => [p.id, p.payload]));
    expect(points[erin]!.updated_at).toBe(pyIsoUtc(NOW));
    expect(points[sam]!.updated_at).not.toBe(pyIsoUtc(NOW));
    expect(points[sam]!.data).toBe('The database is Postgres 15');
    expect(fx.historyRows().length).toBe(history);
    withState(join(tmp.dir, 'state.db'), (state) => {
      const waiting = pendingItems(state, 'm');
      expect(waiting.map((w) => w.memory_id).sort()).toEqual([quiet, sam].sort());
      expect(JSON.parse(waiting.find((w) => w.memory_id === sam)!.evidence!)).toMatchObject({ replacement: { fact: 'The database is Postgres 16.1' } });
    });
    // a week later: the waiting ones are not taken again, the confirmed one is not due
    const again = await drift({ store: 'm' }, jobContext(config, NOW + 7 * DAY));
    expect(again.due).toBe(0);

    // a person: the list shows both, confirm settles one through updated_at
    const store = openStore(config, 'm');
    const state = openStateDb(join(tmp.dir, 'state.db'));
    try {
      const list = await listReview(store, state, config, NOW + 8 * DAY);
      expect(list.pending.map((p) => p.memoryId).sort()).toEqual([quiet, sam].sort());
      expect(list.dueTotal).toBe(2);
      expect(list.next).toEqual([]);
      const d = await confirmMemory(store, state, quiet, NOW + 8 * DAY);
      expect(d).toMatchObject({ resolution: 'confirmed', resolved: 1 });
      expect((await fx.points()).find((p) => p.id === quiet)!.payload.updated_at).toBe(pyIsoUtc(NOW + 8 * DAY));
      expect(pendingItems(state, 'm').map((p) => p.memory_id)).toEqual([sam]);
      await expect(confirmMemory(store, state, '00000000-0000-4000-8000-000000000000', NOW)).rejects.toThrow(/no memory/);
    } finally {
      state.close();
      store.close();
    }
  });
});
