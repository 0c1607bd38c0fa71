/**
 * What a table is, read from the catalogs, in words PostgreSQL itself wrote (format_type, pg_get_expr,
 * pg_get_constraintdef, pg_get_indexdef, pg_get_viewdef) and enough to create it again in another schema: the
 * caller sets `search_path` to the table's schema first, so names inside the schema come out unqualified and names
 * outside it (an extension's `public.vector`) qualified.
 */
import type pg from 'pg';

export interface ColumnDescription {
  name: string;
  /** format_type(): `text`, `timestamp with time zone`, `public.vector(3)`. */
  type: string;
  notNull: boolean;
  /** pg_get_expr of the default, or null. */
  default: string | null;
  /** '' none, 'a' GENERATED ALWAYS AS IDENTITY, 'd' BY DEFAULT. */
  identity: '' | 'a' | 'd';
  /**
   * A serial column (serial, bigserial, smallserial): its default takes the next value of a sequence it owns, made
   * again with the table on restore and set past the highest value restored. Absent: none.
   */
  serial?: true;
  /** The expression of a stored generated column, or null. */
  generated: string | null;
  /** attstorage: p plain, e external (out of line, never compressed), m main, x extended. */
  storage: 'p' | 'e' | 'm' | 'x';
  /** attcompression: '' the server's default, 'p' pglz, 'l' lz4. */
  compression: string;
}

export interface TableDescription {
  name: string;
  columns: ColumnDescription[];
  /** Primary key, unique, check, exclusion first, then foreign keys (ON DELETE CASCADE and all) in name order. */
  constraints: { name: string; type: string; def: string }[];
  /** Indexes that no constraint owns; `using` is what follows `ON table` (`USING btree (subject) WHERE ...`). */
  indexes: { name: string; unique: boolean; using: string }[];
  /** Storage parameters (`fillfactor=90`, `autovacuum_enabled=false`). */
  reloptions: string[];
}

export interface ViewDescription {
  name: string;
  def: string;
}

const q = (id: string) => `"${id.replace(/"/g, '""')}"`;
export const quoteIdent = q;

/** The description of `schema.table`; throws when the table is missing or has what it cannot carry. */
export async function describeTable(client: pg.ClientBase, schema: string, table: string): Promise<TableDescription> {
  const rel = await client.query<{ oid: number; reloptions: string[] | null; relkind: string }>(
    `SELECT c.oid, c.reloptions, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2`, [schema, table]);
  const r = rel.rows[0];
  if (!r || (r.relkind !== 'r')) throw new Error(`table ${schema}.${table} does not exist (or is not a plain table)`);
  const cols = await client.query<ColumnDescription & { seqdefault: boolean; owned: boolean }>(
    `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS "notNull",
            CASE WHEN a.attgenerated = '' THEN pg_get_expr(d.adbin, d.adrelid) END AS default,
            a.attidentity AS identity,
            CASE WHEN a.attgenerated = 's' THEN pg_get_expr(d.adbin, d.adrelid) END AS generated,
            a.attstorage AS storage, a.attcompression AS compression,
            coalesce(pg_get_expr(d.adbin, d.adrelid) LIKE '%nextval(%', false) AS seqdefault,
            a.attidentity = '' AND pg_get_serial_sequence(format('%I.%I', $2::text, $3::text), a.attname) IS NOT NULL AS owned
       FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, [r.oid, schema, table]);
  // A serial column's sequence is its own (made again with it); one shared with others is not carried.
  const shared = cols.rows.find((c) => c.seqdefault && !(c.owned && SERIAL_OF[c.type]));
  if (shared) throw new Error(`column ${table}.${shared.name} takes its default from a sequence it does not own: use an identity column`);
  const cons = await client.query<{ name: string; type: string; def: string }>(
    `SELECT conname AS name, contype AS type, pg_get_constraintdef(oid) AS def FROM pg_constraint
      WHERE conrelid = $1 AND contype IN ('p','u','c','x','f')
      ORDER BY contype = 'f', conname`, [r.oid]);
  // pg_get_indexdef always qualifies the table: what follows `ON schema.table ` is kept, the head is written again.
  const idx = await client.query<{ name: string; unique: boolean; head: string; def: string }>(
    `SELECT c.relname AS name, i.indisunique AS unique, pg_get_indexdef(i.indexrelid) AS def,
            format('CREATE %sINDEX %s ON %s.%s ', CASE WHEN i.indisunique THEN 'UNIQUE ' END, quote_ident(c.relname),
                   quote_ident($2), quote_ident($3)) AS head
       FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      WHERE i.indrelid = $1 AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = $1)
      ORDER BY c.relname`, [r.oid, schema, table]);
  const odd = idx.rows.find((i) => !i.def.startsWith(i.head));
  if (odd) throw new Error(`index ${odd.name} of ${table} reads as ${JSON.stringify(odd.def)}, not as CREATE INDEX ... ON ${schema}.${table}`);
  return {
    name: table,
    columns: cols.rows.map(({ seqdefault, owned: _, ...c }) => (seqdefault ? { ...c, default: null, serial: true as const } : c)),
    constraints: cons.rows,
    indexes: idx.rows.map((i) => ({ name: i.name, unique: i.unique, using: i.def.slice(i.head.length) })),
    reloptions: r.reloptions ?? [],
  };
}

/** Views of `schema` that read any of the tables (oids), in creation order. */
export async function dependentViews(client: pg.ClientBase, tableOids: number[]): Promise<(ViewDescription & { schema: string })[]> {
  const res = await client.query<ViewDescription & { schema: string }>(
    `SELECT DISTINCT v.oid, n.nspname AS schema, v.relname AS name, pg_get_viewdef(v.oid) AS def
       FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid JOIN pg_class v ON v.oid = w.ev_class
       JOIN pg_namespace n ON n.oid = v.relnamespace
      WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
        AND d.refobjid = ANY($1::oid[]) AND v.oid <> d.refobjid ORDER BY v.oid`, [tableOids]);
  return res.rows.map(({ schema, name, def }) => ({ schema, name, def }));
}

/** The serial type that makes a column of this type with a sequence of its own. */
const SERIAL_OF: Record<string, string> = { integer: 'serial', bigint: 'bigserial', smallint: 'smallserial' };

/** CREATE TABLE with columns only (constraints and indexes come after the rows: faster, and checked once). */
export function createTableSql(t: TableDescription): string[] {
  const cols = t.columns.map((c) => {
    let s = `${q(c.name)} ${c.serial ? SERIAL_OF[c.type] : c.type}`;
    if (c.serial) {
      if (!SERIAL_OF[c.type]) throw new Error(`column ${t.name}.${c.name}: a serial column of type ${c.type}`);
    } else if (c.generated) s += ` GENERATED ALWAYS AS (${c.generated}) STORED`;
    else if (c.identity) s += ` GENERATED ${c.identity === 'a' ? 'ALWAYS' : 'BY DEFAULT'} AS IDENTITY`;
    else if (c.default !== null) s += ` DEFAULT ${c.default}`;
    if (c.notNull) s += ' NOT NULL';
    return s;
  });
  const withOpts = t.reloptions.length ? ` WITH (${t.reloptions.join(', ')})` : '';
  const out = [`CREATE TABLE ${q(t.name)} (${cols.join(', ')})${withOpts}`];
  for (const c of t.columns) {
    out.push(`ALTER TABLE ${q(t.name)} ALTER COLUMN ${q(c.name)} SET STORAGE ${({ p: 'PLAIN', e: 'EXTERNAL', m: 'MAIN', x: 'EXTENDED' })[c.storage]}`);
    if (c.compression) out.push(`ALTER TABLE ${q(t.name)} ALTER COLUMN ${q(c.name)} SET COMPRESSION ${c.compression === 'l' ? 'lz4' : 'pglz'}`);
  }
  return out;
}

/** The constraints (foreign keys last) and indexes, once the rows are in. */
export function finishTableSql(t: TableDescription): { keys: string[]; foreign: string[]; indexes: string[] } {
  const add = (c: { name: string; def: string }) => `ALTER TABLE ${q(t.name)} ADD CONSTRAINT ${q(c.name)} ${c.def}`;
  return {
    keys: t.constraints.filter((c) => c.type !== 'f').map(add),
    foreign: t.constraints.filter((c) => c.type === 'f').map(add),
    indexes: t.indexes.map((i) => `CREATE ${i.unique ? 'UNIQUE ' : ''}INDEX ${q(i.name)} ON ${q(t.name)} ${i.using}`),
  };
}

/** The columns COPY carries (a stored generated column is computed again, never copied). */
export const copiedColumns = (t: TableDescription) => t.columns.filter((c) => !c.generated);
