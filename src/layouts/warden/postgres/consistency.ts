import type { CheckReport, PostgresStoreHandle } from '../../contract.js';
import { finding, isProblem, ID_SAMPLE, type Finding } from '../../../job/findings.js';
import type { Instant } from '../../../time/instants.js';
import { compareWithVectors, mergeConsistency, type CollectionTally, type ConsistencyOptions, type RowSide, type VectorSummary } from '../consistency.js';
import { VECTOR_TABLES_SQL } from '../../../vectors/registry.js';
import { quoteIdent } from '../../../engines/postgres/session.js';
import type { PgvectorConfig } from '../../../vectors/registry.js';
import { LIVE } from './check.js';

const UUID_RE = `'^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'`;

/**
 * The warden check's vector half on PostgreSQL with vectors in pgvector tables (`postgres.vectors`): the findings the
 * Qdrant comparison makes on SQLite (src/layouts/warden/consistency.ts), with the same codes: vectors whose row is gone
 * (`orphan_points`, a problem), live rows with no vector in every table (or in any, `expectPoints`; `missing_points`),
 * payloads whose `textKey` differs from the fact (`payload_mismatch`), vectors that name no row (`unmapped_points`),
 * live ids a uuid id column cannot hold (`unmappable_rows`). The tables are in the store's own database, so both sides
 * are read in SQL in one repeatable-read transaction: one instant, no race with rows written during the check.
 */
export async function withPgvectorConsistency(report: CheckReport, store: PostgresStoreHandle, now: Instant): Promise<CheckReport & { vectors?: VectorSummary }> {
  const cfg = store.config.postgres?.vectors;
  if (!cfg) return report;
  const client = await store.pg.connect();
  let summary: { findings: Finding[]; vectors: VectorSummary };
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    summary = await compare(client, store, cfg, new Date(now));
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw store.pg.explain(err, 'check vectors');
  } finally {
    client.release();
  }
  const problems = [...report.problems, ...summary.findings.filter(isProblem)];
  const notes = [...report.notes, ...summary.findings.filter((f) => !isProblem(f))];
  return { ...report, ok: problems.length === 0, problems, notes, vectors: summary.vectors };
}

/**
 * The warden check's vector half on PostgreSQL with a `qdrant:` section: the comparison a SQLite store's check makes
 * (src/layouts/warden/consistency.ts, the same findings and counts), over the schema's rows. Qdrant is another
 * server, so the two sides cannot be read at one instant: as beside a SQLite file, the points are scrolled first and
 * each page's rows looked up on the store's pool, then the live rows walked a page at a time (keyset on id) and asked
 * about in Qdrant. Agents write a row before its point and memory-warden deletes a point before its row, so a race
 * with them shows as a missing point (a warning), never as an orphan.
 */
export async function withQdrantConsistency(report: CheckReport, store: PostgresStoreHandle, opts: ConsistencyOptions): Promise<CheckReport & { vectors?: VectorSummary }> {
  if (!store.vectors) return report;
  try {
    return mergeConsistency(report, await compareWithVectors(pgRows(store, opts.now), store.vectors, opts));
  } catch (err) {
    throw store.pg.explain(err, 'check vectors');
  }
}

/** The rows side of the comparison on a PostgreSQL store: its memory table, by the primary key's order. */
function pgRows(store: PostgresStoreHandle, now: Instant): RowSide {
  const s = store.schema;
  const at = new Date(now);
  return {
    async rowsById(ids) {
      const r = await store.pg.query<{ id: string; fact: string }>(`SELECT id, fact FROM ${s}.memory WHERE id = ANY($1::text[])`, [ids]);
      return new Map(r.rows.map((x) => [x.id, x.fact]));
    },
    async livePage(after, limit) {
      const r = after === undefined
        ? await store.pg.query<{ id: string }>(`SELECT id FROM ${s}.memory WHERE ${LIVE('$1')} ORDER BY id LIMIT $2`, [at, limit])
        : await store.pg.query<{ id: string }>(`SELECT id FROM ${s}.memory WHERE ${LIVE('$1')} AND id > $3 ORDER BY id LIMIT $2`, [at, limit, after]);
      return r.rows;
    },
    marks: () => undefined,
  };
}

type Q = Pick<PostgresStoreHandle['pg'], 'query'>;

interface Table {
  name: string;
  t: string;
  uuid: boolean;
}

async function compare(q: Q, store: PostgresStoreHandle, cfg: PgvectorConfig, now: Date) {
  const s = store.schema;
  const types = new Map((await q.query<{ name: string; id_type: string }>(VECTOR_TABLES_SQL, [store.config.postgres!.schema])).rows.map((r) => [r.name, r.id_type]));
  const tables: Table[] = cfg.tables.map((name) => ({ name, t: `${s}.${quoteIdent(name)}`, uuid: types.get(name) === 'uuid' }));
  const key = (v: string) => `${v}.payload->>'${cfg.payloadKey.replace(/'/g, "''")}'`;
  // The row a vector names, and whether that row exists (vector → row).
  const named = (tb: Table) => (cfg.pointId === 'payload' ? key('v') : 'v.id::text');
  const rowOf = (tb: Table) => (cfg.pointId === 'payload' ? `m.id = ${key('v')}` : tb.uuid ? `m.id IN (v.id::text, upper(v.id::text))` : 'm.id = v.id');
  // A live row's vector in a table (row → vector), by the table's own index where it has one.
  const vectorOf = (tb: Table) => (cfg.pointId === 'payload' ? `${key('v')} = m.id` : tb.uuid ? `v.id = (CASE WHEN m.id ~ ${UUID_RE} THEN m.id::uuid END)` : 'v.id = m.id');
  const textKey = cfg.textKey === undefined ? null : `'${cfg.textKey.replace(/'/g, "''")}'`;
  const samples = { orphan: new Sample(), unmapped: new Sample(), mismatch: new Sample() };
  const tallies: CollectionTally[] = [];
  for (const tb of tables) {
    const r = await q.query<{ kind: string | null; pid: string; rid: string | null; n: string; points: string }>(
      `WITH c AS (
         SELECT v.id::text AS pid, ${named(tb)} AS rid,
           CASE WHEN ${named(tb)} IS NULL THEN 'unmapped'
                WHEN m.id IS NULL THEN 'orphan'
                ${textKey ? `WHEN jsonb_typeof(v.payload->${textKey}) = 'string' AND v.payload->>${textKey} <> m.fact THEN 'mismatch'` : ''}
           END AS kind
         FROM ${tb.t} v LEFT JOIN ${s}.memory m ON ${rowOf(tb)}),
       k AS (SELECT kind, pid, rid, count(*) OVER (PARTITION BY kind) AS n, row_number() OVER (PARTITION BY kind ORDER BY pid) AS r FROM c WHERE kind IS NOT NULL)
       SELECT kind, pid, rid, n, (SELECT count(*) FROM c) AS points FROM k WHERE r <= ${ID_SAMPLE}
       UNION ALL SELECT NULL, '', NULL, 0, (SELECT count(*) FROM c)`);
    const t: CollectionTally = { collection: tb.name, points: 0, orphanPoints: 0, missingPoints: 0, payloadMismatch: 0, unmappedPoints: 0 };
    for (const row of r.rows) {
      t.points = Number(row.points);
      if (row.kind === null) continue;
      const sample = samples[row.kind as keyof typeof samples];
      sample.take(`${tb.name}:${row.pid}${row.kind === 'mismatch' ? ` (row ${row.rid})` : ''}`, Number(row.n), tb.name);
      if (row.kind === 'orphan') t.orphanPoints = Number(row.n);
      if (row.kind === 'unmapped') t.unmappedPoints = Number(row.n);
      if (row.kind === 'mismatch') t.payloadMismatch = Number(row.n);
    }
    tallies.push(t);
  }
  const missing = new Sample();
  let liveRows = 0;
  let unmappable = 0;
  if (cfg.expectPoints !== 'none') {
    // A live id a uuid id column cannot hold is unmappable (by id), not missing.
    const mappable = cfg.pointId === 'id' && tables.some((tb) => tb.uuid) ? `m.id ~ ${UUID_RE}` : 'true';
    const lacks = tables.map((tb, i) => `NOT EXISTS (SELECT 1 FROM ${tb.t} v WHERE ${vectorOf(tb)}) AS l${i}`).join(', ');
    const missed = tables.map((_, i) => `l${i}`).join(cfg.expectPoints === 'any' ? ' AND ' : ' OR ');
    const r = await q.query<Record<string, string | null>>(
      `WITH l AS (SELECT m.id, ${mappable} AS ok FROM ${s}.memory m WHERE ${LIVE('$1')}),
            x AS (SELECT l.id, ${lacks} FROM l JOIN ${s}.memory m ON m.id = l.id WHERE l.ok),
            miss AS (SELECT * FROM x WHERE ${missed})
       SELECT (SELECT count(*) FROM l) AS live, (SELECT count(*) FROM l WHERE NOT ok) AS unmappable, (SELECT count(*) FROM miss) AS missing,
              ${tables.map((_, i) => `(SELECT count(*) FROM miss WHERE l${i}) AS m${i}`).join(', ')},
              (SELECT string_agg(id, E'\\n' ORDER BY id COLLATE "C") FROM (SELECT id FROM miss ORDER BY id COLLATE "C" LIMIT ${ID_SAMPLE}) s) AS sample`, [now]);
    const row = r.rows[0]!;
    liveRows = Number(row.live);
    unmappable = Number(row.unmappable);
    missing.count = Number(row.missing);
    missing.ids.push(...(row.sample ? row.sample.split('\n') : []));
    tables.forEach((_, i) => (tallies[i]!.missingPoints = Number(row[`m${i}`])));
  }
  const where = `pgvector ${cfg.tables.join(', ')}`;
  const findings: Finding[] = [];
  const { orphan, unmapped, mismatch } = samples;
  if (orphan.count > 0) {
    findings.push(finding('orphan_points', 'error',
      `${orphan.count} vector(s) in ${where} whose row no longer exists: deleted memories that retrieval still returns (left by a delete that was not memory-warden's: prune and erase delete them with their rows)`,
      orphan.ids, orphan.count));
  }
  if (missing.count > 0) {
    findings.push(finding('missing_points', 'warning',
      `${missing.count} live row(s) with no vector in ${cfg.expectPoints === 'any' ? 'any of' : 'each of'} ${where}: retrieval cannot find them`, missing.ids, missing.count));
  }
  if (mismatch.count > 0) {
    findings.push(finding('payload_mismatch', 'warning',
      `${mismatch.count} vector(s) whose payload "${cfg.textKey}" differs from the row's fact: retrieval returns text the store no longer holds`, mismatch.ids, mismatch.count));
  }
  if (unmapped.count > 0) {
    findings.push(finding('unmapped_points', 'warning',
      `${unmapped.count} vector(s) that name no row (payload "${cfg.payloadKey}" missing): cannot be checked, never deleted by prune`, unmapped.ids, unmapped.count));
  }
  if (unmappable > 0) {
    findings.push(finding('unmappable_rows', 'warning',
      `${unmappable} live row id(s) that a uuid id column cannot hold: use pointId payload`, undefined, unmappable));
  }
  return { findings, vectors: { liveRows, unmappableRows: unmappable, collections: tallies } };
}

/** A capped sample of ids next to an exact count, summed over the tables. */
class Sample {
  count = 0;
  readonly ids: string[] = [];
  private readonly counted = new Set<string>();
  take(id: string, tableCount: number, table: string): void {
    if (!this.counted.has(table)) {
      this.counted.add(table);
      this.count += tableCount;
    }
    if (this.ids.length < ID_SAMPLE) this.ids.push(id);
  }
}
