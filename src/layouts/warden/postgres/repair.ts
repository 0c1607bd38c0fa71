import type pg from 'pg';
import type { DanglingRepair, OrphanRepair, OrphanRepairOptions, PostgresStoreHandle, TimestampLeft, TimestampRepair } from '../../contract.js';
import { sqlState } from '../../../engines/postgres/session.js';
import { engineFor } from '../../../engines/registry.js';
import { transientError } from '../../../core/errors.js';
import { ID_SAMPLE } from '../../../job/findings.js';
import { repairOrphansWith } from '../consistency.js';

/**
 * The warden layout's repairs on PostgreSQL (src/layouts/warden/repair.ts and consistency.ts are SQLite's): what each
 * means where the times are timestamptz and the foreign key is the table's own, not the connection's.
 */

/** A batch that met an agent's lock past lock_timeout is tried again this many times, then the repair fails (transient). */
const LOCK_RETRIES = 50;
/** A batch whose chains an agent extended meanwhile (a row whose points were not deleted first) is tried again this often. */
const CHAIN_ATTEMPTS = 5;

/** `m` superseded by a row that does not exist. */
const DANGLING = (s: string) => `m.superseded_by IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ${s}.memory p WHERE p.id = m.superseded_by)`;

/** $1 with every row whose supersede chain leads to one of them (what ON DELETE CASCADE takes), rings once. */
const WITH_VERSIONS = (s: string) => `WITH RECURSIVE c(id) AS (
  SELECT id FROM ${s}.memory WHERE id = ANY($1::text[])
  UNION SELECT m.id FROM ${s}.memory m JOIN c ON m.superseded_by = c.id)
SELECT id FROM c`;

type Queryable = Pick<pg.PoolClient, 'query'>;

async function withVersions(q: Queryable, s: string, roots: readonly string[]): Promise<string[]> {
  if (roots.length === 0) return [];
  return (await q.query<{ id: string }>(WITH_VERSIONS(s), [roots])).rows.map((r) => r.id);
}

/**
 * What the schema says of the chains' foreign key: an agent's own table may have none (then nothing stops a delete
 * from leaving its older versions pointing at nothing), one added NOT VALID (rows from before it are not checked), or
 * one whose triggers were disabled (ALTER TABLE … DISABLE TRIGGER, a restore tool's). A session that runs with
 * session_replication_role = replica skips it too, and leaves no trace in the schema.
 */
async function foreignKeyOf(store: PostgresStoreHandle): Promise<NonNullable<DanglingRepair['foreignKey']>> {
  const r = await store.pg.query<{ valid: boolean; disabled: boolean }>(
    `SELECT c.convalidated AS valid, EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgconstraint = c.oid AND t.tgenabled = 'D') AS disabled
       FROM pg_constraint c
      WHERE c.conrelid = $1::regclass AND c.confrelid = c.conrelid AND c.contype = 'f'
        AND c.conkey = ARRAY[(SELECT attnum FROM pg_attribute WHERE attrelid = c.conrelid AND attname = 'superseded_by')]
      ORDER BY c.convalidated DESC LIMIT 1`, [`${store.schema}.memory`]);
  const fk = r.rows[0];
  if (!fk) return 'absent';
  if (fk.disabled) return 'disabled';
  return fk.valid ? 'enforced' : 'not-valid';
}

/**
 * repair dangling on PostgreSQL: the rows superseded by a row that does not exist (possible only where the foreign
 * key is absent, not valid or disabled: `foreignKey` says which) deleted with every older version whose chain leads to
 * them, their points first, under the store's advisory lock, in short transactions of `batchSize` roots under
 * `SET LOCAL lock_timeout` beside agents writing. Each root is locked and re-read inside its transaction (a row
 * the agent wrote back meanwhile, or re-pointed, keeps it). Never reset to NULL. kill -9 rolls the open batch back;
 * the next run finds what is left.
 */
export async function repairDanglingPg(store: PostgresStoreHandle): Promise<DanglingRepair> {
  const s = store.schema;
  const cfg = store.config.postgres!;
  const out: DanglingRepair = { store: store.name, deleted: 0, dangling: [], cascaded: [], foreignKey: await foreignKeyOf(store) };
  const lock = await (await engineFor(store.config)).lock(store, 'repair dangling');
  const client = await store.pg.connect();
  const vectorsGone = new Set<string>();
  try {
    // A pass finds the dangling rows; a later one those agents left dangling meanwhile (no foreign key stops them).
    for (;;) {
      const roots = (await client.query<{ id: string }>(`SELECT m.id FROM ${s}.memory m WHERE ${DANGLING(s)} ORDER BY m.id`)).rows.map((r) => r.id);
      let deleted = 0;
      for (let i = 0; i < roots.length; i += cfg.batchSize) {
        const done = await deleteDanglingBatch(client, store, roots.slice(i, i + cfg.batchSize), vectorsGone);
        for (const id of done.roots) out.dangling.push(id);
        for (const id of done.versions) out.cascaded.push(id);
        deleted += done.roots.length + done.versions.length;
      }
      out.deleted += deleted;
      if (deleted === 0) break;
    }
  } finally {
    client.release();
    await lock.release();
  }
  return out;
}

class ChainGrew extends Error {}

async function deleteDanglingBatch(client: pg.PoolClient, store: PostgresStoreHandle, batch: readonly string[], vectorsGone: Set<string>): Promise<{ roots: string[]; versions: string[] }> {
  const s = store.schema;
  for (let attempt = 1, waited = 0; ; ) {
    // Points first, outside the transaction: an agent never waits on a network call.
    if (store.vectors) {
      const planned = (await withVersions(client, s, batch)).filter((id) => !vectorsGone.has(id));
      if (planned.length > 0) await store.vectors.deleteForRows(planned);
      planned.forEach((id) => vectorsGone.add(id));
    }
    try {
      await client.query('BEGIN');
      await client.query(`SET LOCAL lock_timeout = ${Math.floor(store.config.postgres!.lockTimeoutMs)}`);
      const roots = (await client.query<{ id: string }>(
        `SELECT m.id FROM ${s}.memory m WHERE m.id = ANY($1::text[]) AND ${DANGLING(s)} ORDER BY m.id FOR UPDATE OF m`, [batch])).rows.map((r) => r.id);
      // Older versions locked, then read again: one re-pointed before the lock is not taken.
      const first = (await withVersions(client, s, roots)).filter((id) => !roots.includes(id));
      if (first.length > 0) await client.query(`SELECT id FROM ${s}.memory WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [first]);
      const doomed = await withVersions(client, s, roots);
      const gone = doomed.length === 0 ? [] : (await client.query<{ id: string }>(`DELETE FROM ${s}.memory WHERE id = ANY($1::text[]) RETURNING id`, [doomed])).rows.map((r) => r.id);
      if (store.vectors && gone.some((id) => !vectorsGone.has(id))) throw new ChainGrew();
      await client.query('COMMIT');
      const rootSet = new Set(roots);
      return { roots: gone.filter((id) => rootSet.has(id)), versions: gone.filter((id) => !rootSet.has(id)) };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      if (err instanceof ChainGrew) {
        if (++attempt > CHAIN_ATTEMPTS) throw transientError('repair dangling: supersede chains kept changing during the attempts; try again');
        continue;
      }
      // An agent held a row's lock past lock_timeout (55P03), or a deadlock was broken (40P01): let it finish.
      if ((sqlState(err) === '55P03' || sqlState(err) === '40P01') && ++waited <= LOCK_RETRIES) {
        await new Promise((r) => setTimeout(r, 5 + Math.random() * 20));
        continue;
      }
      throw store.pg.explain(err, 'repair dangling');
    }
  }
}

const TIME_COLUMNS = ['created_at', 'confirmed_at', 'expires_at', 'last_used_at'];
const INSTANT = 'timestamp with time zone';

/**
 * repair timestamps on PostgreSQL: a timestamptz column holds instants only (the server refuses any text it cannot
 * read as one), so nothing is unparseable and there is no other form to rewrite: it rewrites nothing, ever. What it
 * does look for is what SQLite's canonical text cannot hold either: `infinity`, `-infinity`, and instants outside the
 * years 0000-9999 in UTC (timestamptz reaches 4713 BC to 294276 AD); those are left for a person, listed. A time
 * column of another type (an agent's own table) is named in `notes`. Values listed as UTC. Reads only.
 */
export async function repairTimestampsPg(store: PostgresStoreHandle): Promise<TimestampRepair> {
  const s = store.schema;
  const out: TimestampRepair = { store: store.name, rewritten: 0, unparseable: 0, outOfRange: 0, changes: [], left: [], notes: [] };
  const cols = (await store.pg.query<{ name: string; type: string }>(
    `SELECT attname AS name, format_type(atttypid, atttypmod) AS type FROM pg_attribute
      WHERE attrelid = $1::regclass AND attname = ANY($2::text[]) AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
    [`${s}.memory`, TIME_COLUMNS])).rows;
  const instants = cols.filter((c) => c.type === INSTANT).map((c) => c.name);
  if (instants.length > 0) {
    out.notes!.push(`${instants.join(', ')}: ${INSTANT} (timestamptz), which holds only instants: nothing unparseable or in another form can be stored, so nothing is rewritten`);
  }
  for (const c of cols.filter((c) => c.type !== INSTANT)) {
    out.notes!.push(`${c.name} is ${c.type}, not timestamptz: not looked at (memory-warden reads the times of a PostgreSQL store as timestamptz; ALTER TABLE memory ALTER COLUMN ${c.name} TYPE timestamptz makes it one)`);
  }
  for (const col of instants) {
    const outside = `NOT isfinite(${col}) OR (${col} AT TIME ZONE 'UTC') < '0001-01-01 00:00:00 BC'::timestamp OR (${col} AT TIME ZONE 'UTC') >= '10000-01-01 00:00:00'::timestamp`;
    const r = await store.pg.query<{ id: string; value: string; n: string }>(
      `SELECT id, (${col} AT TIME ZONE 'UTC')::text AS value, count(*) OVER () AS n FROM ${s}.memory WHERE ${outside} ORDER BY id LIMIT ${ID_SAMPLE}`);
    out.outOfRange += Number(r.rows[0]?.n ?? 0);
    for (const row of r.rows) if (out.left!.length < ID_SAMPLE) out.left!.push({ id: row.id, column: col, value: row.value } satisfies TimestampLeft);
  }
  return out;
}

/**
 * repair orphans on PostgreSQL: the points of the store's Qdrant collections whose row is not in the memory table,
 * each page's rows looked up again right before its delete, under the store's advisory lock (a dry run takes none).
 */
export async function repairOrphansPg(store: PostgresStoreHandle, opts: OrphanRepairOptions): Promise<OrphanRepair> {
  const rowsOf = async (ids: string[]) =>
    new Set((await store.pg.query<{ id: string }>(`SELECT id FROM ${store.schema}.memory WHERE id = ANY($1::text[])`, [ids])).rows.map((r) => r.id));
  return repairOrphansWith(store, rowsOf, async (work) => {
    const lock = await (await engineFor(store.config)).lock(store, 'repair orphans');
    try {
      await work();
    } finally {
      await lock.release();
    }
  }, opts);
}
