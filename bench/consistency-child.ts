/**
 * One measured side of the consistency benchmark, in its own process so the Qdrant test server's memory is not
 * counted (the probe, bench/consistency-probe.ts, reports this process's memory):
 *
 *   node dist/bench/consistency-child.js check CONFIG STORE PAGE — checkConsistency, as `check` runs it
 *   node dist/bench/consistency-child.js floor CONFIG STORE PAGE — the floor: scroll every point (id and the
 *     payload keys the check reads) and read every live row id, nothing compared
 *   node dist/bench/consistency-child.js lookup CONFIG STORE PAGE — the floor's scroll plus what any checker
 *     comparing texts must add: each page's rows looked up by id (orphansOfPage), nothing else
 *
 * Prints one JSON line: the duration and what was counted.
 */
import { loadConfig } from '../src/config/config.js';
import { openStore } from '../src/layouts/open.js';
import { checkConsistency, orphansOfPage, scrollPoints } from '../src/layouts/warden/consistency.js';
import { QdrantStore } from '../src/vectors/qdrant/index.js';

const [mode, configFile, storeName, pageArg] = process.argv.slice(2);
const pageSize = Number(pageArg ?? 1000);

async function main(): Promise<void> {
  const config = loadConfig({ file: configFile! });
  const store = openStore(config, storeName!);
  const q = store.vectors;
  if (!(q instanceof QdrantStore)) throw new Error(`${storeName}: no qdrant section`);
  const now = Date.now();
  const t0 = performance.now();
  let result: Record<string, unknown>;
  if (mode === 'check') {
    const r = await checkConsistency(store.db, q, { now, pageSize });
    result = { liveRows: r.liveRows, collections: r.collections, findings: Object.fromEntries(r.findings.map((f) => [f.code, f.count ?? f.ids?.length ?? 0])) };
  } else if (mode === 'floor') {
    let points = 0;
    for (const c of q.collections) for await (const page of scrollPoints(q, c, pageSize)) points += page.length;
    const scrollMs = performance.now() - t0;
    const page = store.db.prepare(`SELECT id FROM memory
      WHERE id > @after AND +superseded_by IS NULL AND (+expires_at IS NULL OR coalesce(warden_epoch(expires_at) > @now, 1))
      ORDER BY id LIMIT @limit`).pluck();
    let rows = 0;
    let after = '';
    for (;;) {
      const ids = page.all({ after, now, limit: pageSize }) as string[];
      if (ids.length === 0) break;
      rows += ids.length;
      after = ids[ids.length - 1]!;
    }
    result = { points, liveRows: rows, scrollMs: Math.round(scrollMs) };
  } else if (mode === 'lookup') {
    let points = 0;
    let orphans = 0;
    for (const c of q.collections) {
      for await (const page of scrollPoints(q, c, pageSize)) {
        points += page.length;
        orphans += orphansOfPage(store.db, q, page).orphans.length;
      }
    }
    result = { points, orphans };
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  store.close();
  process.stdout.write(`${JSON.stringify({ ms: Math.round(performance.now() - t0), ...result })}\n`);
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
