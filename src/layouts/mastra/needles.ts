import type { EraseSelector } from '../contract.js';
import { quoteId, type LibDb, type MastraFiles } from './files.js';
import { hasTable } from './delete.js';
import { MESSAGES, OBSERVATIONS, RESOURCES, THREADS } from './names.js';
import { embeddingParams, embeddingWhere, json, selected, type Plan } from './selection.js';
import { needlesFound } from './scrub.js';

// Erase's read-back of a Mastra store (docs/mastra-layout.md): what of the person the files still hold, byte for
// byte. The needles are the person's own: the resource id (--user) and the ids given (--ids), the id of every thread,
// message, resource and observation record erased (a message memory-warden's prune took before included), the subject
// (--subject), every text those rows held (messages, titles, working memories, observations, the embeddings'
// copies), and the vector of each embedding erased. A needle that a row the selector does not take also holds (another user's message saying the same
// thing, a word in another resource's working memory) is still in the file by right: counted apart as shared.

/** Needles and texts shorter than this are not searched: so few bytes are found anywhere. */
const MIN_NEEDLE = 3;
/**
 * Shorter than this, a needle's bytes turn up in any file (a resource id `ana` in `banana`, in a column's name): it
 * is looked for as a whole value instead, in the live rows of every table (the scrub left nothing else), equal to a
 * column or quoted in one (`"ana"`, as JSON holds it).
 */
const RAW_MIN = 8;

export interface ReadBack {
  /** Needles searched. */
  needles: number;
  /** The person's needles still found in a file or its WAL: 0 only when none is. */
  left: number;
  /** Needles found only where rows the erase does not take hold them too. */
  shared: number;
}

/** A needle: an id or text, or the bytes of an embedding's vector. */
export type Needle = string | Buffer;

/** The person's ids, texts and embedding vectors, deduplicated. */
export function needlesOf(sel: EraseSelector, p: Plan): Needle[] {
  const given = 'user' in sel ? [sel.user] : 'ids' in sel ? sel.ids : [sel.subject];
  const all = [...given, ...p.resources, ...p.threads, ...p.messages, ...p.observations, ...p.texts];
  const vectors = new Map(p.vectors.map((v) => [v.toString('hex'), v]));
  return [...[...new Set(all)].filter((n) => n.trim().length >= MIN_NEEDLE), ...vectors.values()];
}

/**
 * The bytes a needle is found by: as written (UTF-8) and JSON-escaped (message content and embedding metadata are
 * JSON). A text that was not UTF-8 in the store reads with U+FFFD in place of each bad byte: it is found by its runs
 * of good bytes.
 */
export function formsOf(needle: Needle): Buffer[] {
  if (Buffer.isBuffer(needle)) return [needle];
  const runs = needle.includes('\uFFFD') ? needle.split('\uFFFD').filter((r) => r.trim().length >= MIN_NEEDLE) : [needle];
  return [...new Set(runs.flatMap((r) => [r, JSON.stringify(r).slice(1, -1)]))].map((s) => Buffer.from(s, 'utf8'));
}

/** Every file read back for the needles; those found are then looked for in the rows the selector does not take. */
export function readBack(f: MastraFiles, paths: readonly string[], sel: EraseSelector, deletedIds: readonly string[], needles: readonly Needle[]): ReadBack {
  const short = (n: Needle): n is string => typeof n === 'string' && Buffer.byteLength(n, 'utf8') < RAW_MIN;
  const forms = needles.map((n) => (short(n) ? [] : formsOf(n)));
  const found = needlesFound(paths, forms);
  // Read again: a row an agent wrote for the person meanwhile is the person's, not another's.
  const now = found.size > 0 || needles.some(short) ? selected(f, sel, deletedIds) : undefined;
  const whole = wholeValues(f, sel, now, needles.filter(short));
  if (found.size === 0) return { needles: needles.length, left: whole.left, shared: whole.shared };
  const pending = new Set(found);
  for (const { db, table, where, params } of othersRows(f, sel, now!)) {
    if (pending.size === 0) break;
    const cols = (db.prepare('SELECT name FROM pragma_table_info(?)').all(table) as { name: string }[]).map((c, i) => `CAST(${quoteId(c.name)} AS BLOB) AS c${i}`);
    if (cols.length === 0) continue;
    // Read to the end, not left half-way: a statement left open would hold its read snapshot.
    for (const row of db.prepare(`SELECT ${cols.join(', ')} FROM ${quoteId(table)} WHERE ${where}`).iterate(params) as IterableIterator<Record<string, unknown>>) {
      if (pending.size === 0) continue;
      const values = Object.values(row).filter((v): v is Buffer => Buffer.isBuffer(v));
      for (const i of pending) if (forms[i]!.some((form) => values.some((v) => v.includes(form)))) pending.delete(i);
    }
  }
  return { needles: needles.length, left: pending.size + whole.left, shared: found.size - pending.size + whole.shared };
}

/**
 * Short needles as whole values: in a row of Mastra's memory tables the selector does not take, another's (shared);
 * in any other table's row, still the person's (left).
 */
function wholeValues(f: MastraFiles, sel: EraseSelector, now: Plan | undefined, needles: readonly string[]): { left: number; shared: number } {
  if (needles.length === 0 || !now) return { left: 0, shared: 0 };
  const others = othersRows(f, sel, now);
  const memory = new Set(others.map((o) => `${o.db === f.db ? 'db' : 'vec'}:${o.table}`));
  const tables: Rows[] = [];
  for (const [db, key] of new Set([[f.db, 'db'], [f.vec, 'vec']] as const)) {
    if (key === 'vec' && f.vec === f.db) continue;
    for (const { name } of db.prepare(`SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'`).all() as { name: string }[]) {
      if (!memory.has(`${key}:${name}`)) tables.push({ db, table: name, where: '1', params: {} });
    }
  }
  // Another table first: a row there naming the person is the person's, whatever other people's rows say.
  tables.push(...others);
  let left = 0;
  let shared = 0;
  for (const n of needles) {
    const where = tables.find(({ db, table, where: w, params }) => {
      const cols = (db.prepare('SELECT name FROM pragma_table_info(?)').all(table) as { name: string }[]).map((c) => quoteId(c.name));
      if (cols.length === 0) return false;
      const holds = cols.map((c) => `(${c} = @needle OR instr(CAST(${c} AS BLOB), CAST(@quoted AS BLOB)) > 0)`).join(' OR ');
      return db.prepare(`SELECT 1 FROM ${quoteId(table)} WHERE (${w}) AND (${holds}) LIMIT 1`).all({ ...params, needle: n, quoted: JSON.stringify(n) }).length > 0;
    });
    if (!where) continue;
    if (memory.has(`${where.db === f.db ? 'db' : 'vec'}:${where.table}`)) shared++;
    else left++;
  }
  return { left, shared };
}

interface Rows {
  db: LibDb;
  table: string;
  where: string;
  params: object;
}

/** Mastra's memory tables and embeddings, less the rows the selector takes now. */
function othersRows(f: MastraFiles, sel: EraseSelector, now: Plan): Rows[] {
  const notIn = (ids: readonly string[]) => ({ where: `id NOT IN (SELECT value FROM json_each(@ids))`, params: { ids: json(ids) } });
  const tables: Rows[] = [
    { db: f.db, table: THREADS, ...notIn([...now.threads, ...now.clearThreads]) },
    { db: f.db, table: MESSAGES, ...notIn(now.messages) },
    { db: f.db, table: RESOURCES, ...notIn([...now.resources, ...now.clearResources]) },
  ];
  if (hasTable(f, OBSERVATIONS)) tables.push({ db: f.db, table: OBSERVATIONS, ...notIn(now.observations) });
  for (const t of f.vectorTables) tables.push({ db: f.vec, table: t, where: `NOT coalesce(${embeddingWhere(sel)}, 0)`, params: embeddingParams(sel, now) });
  return tables;
}
