import { afterEach, beforeEach, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { qdrantTarget, type QdrantTarget } from '../helpers/qdrant-server.js';
import { tempDir } from '../helpers/store.js';
import { Mem0Fixture } from './mem0-fixture.js';
import { takeSnapshot } from '../../src/snapshot/create.js';
import { restoreSnapshot } from '../../src/snapshot/restore.js';
import { readManifest } from '../../src/snapshot/manifest.js';
import { openStore } from '../../src/layouts/open.js';
import { mem0Integrity } from '../../src/layouts/mem0/check.js';
import { silentLogger } from '../../src/log/logger.js';
import { join } from 'node:path';

const NOW = Date.UTC(2026, 10, 29, 6, 0, 0);
const DAY = 86_400_000;

let q: QdrantTarget;
let tmp: { dir: string; cleanup: () => void };
let fx: Mem0Fixture | undefined;
beforeEach(async () => {
  q = await qdrantTarget();
  tmp = tempDir('mw-mem0-snap-');
});
afterEach(async () => {
  fx?.close();
  q.assertConforms();
  await q.close();
  tmp.cleanup();
});

it('a mem0 store snapshots history.db and both collections into one folder, and restores them together', async () => {
  fx = await Mem0Fixture.create(q, tmp.dir);
  const a = await fx.add('Ines speaks Portuguese', { user_id: 'ines', at: NOW - 3 * DAY });
  const b = await fx.add('Ines lives in Porto', { user_id: 'ines', at: NOW - 2 * DAY });
  await fx.entity('Porto', [b], { user_id: 'ines' });
  fx.close();
  const config = fx.config();
  const snap = await takeSnapshot(config, 'm', { now: () => NOW, log: silentLogger });
  const manifest = readManifest(snap.dir);
  expect(manifest.layout).toBe('mem0');
  expect(manifest.qdrant.map((p) => p.collection).sort()).toEqual([fx.collection, fx.entities].sort());
  expect(snap.points).toEqual({ [fx.collection]: 2, [fx.entities]: 1 });

  // Afterwards mem0 deletes one memory (point, DELETE row, entity) and adds another.
  const f2 = new Mem0Fixture(q, fx.historyPath, fx.collection, fx.entities);
  await f2.delete(b, NOW + DAY);
  await fetch(`${q.url}/collections/${fx.entities}/points/delete?wait=true`, { method: 'POST', headers: { 'content-type': 'application/json', ...(q.apiKey ? { 'api-key': q.apiKey } : {}) }, body: JSON.stringify({ filter: { must: [{ key: 'data', match: { value: 'Porto' } }] } }) });
  await f2.add('Ines moved to Lisbon', { user_id: 'ines', at: NOW + DAY });
  f2.close();

  const r = await restoreSnapshot(config, 'm', snap.dir, { now: () => NOW + 2 * DAY, log: silentLogger });
  expect(r.dryRun).toBe(false);
  expect(new Set((await fx.points()).map((p) => p.id))).toEqual(new Set([a, b]));
  expect((await fx.entityPoints()).map((e) => e.payload.linked_memory_ids)).toEqual([[b]]);
  const h = new Database(fx.historyPath, { readonly: true });
  const events = h.prepare('SELECT memory_id, event FROM history ORDER BY rowid').all();
  h.close();
  expect(events).toEqual([{ memory_id: a, event: 'ADD' }, { memory_id: b, event: 'ADD' }]);
  // Restored together: nothing came back, nothing lost.
  const store = openStore(config, 'm');
  try {
    const findings = await mem0Integrity(store, { now: NOW + 2 * DAY, mountsFile: join(tmp.dir, 'none') });
    expect(findings.filter((x) => x.severity !== 'info')).toEqual([]);
  } finally {
    store.close();
  }
});
