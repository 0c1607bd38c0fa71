import type { Db } from '../../store/sqlite.js';
import { memoryColumns } from './schema.js';
import { deleteRoots } from './delete.js';
import type { Mem0Point, PointStore } from '../../vectors/contract.js';
import { rowVectorsFor, VECTOR_STORES } from '../../vectors/registry.js';
import { sweepCollections } from '../erase-sweep.js';
import type { EraseOptions, EraseSelector, Erased, ErasedFields, LayoutEraseOptions, StoreHandle } from '../contract.js';
import { StringList, type Strings } from '../../text/string-list.js';
import { pollYoungGeneration } from '../../core/young-generation.js';

/** The warden layout's erase (src/erase/erase.ts runs it): rows with their cascade, then points still holding the text. */

/** Each erase transaction holds the write lock about this long. */
const ERASE_BATCH_MS = 40;
/** Roots handed to one delete call: more than one call's time budget takes. */
const ROOTS_AHEAD = 4096;

/**
 * The rows the selector names (before their cascade), `columns` of each as an array, row by row: the one pass over
 * the table that finds them (without an index on what a selector names, a scan).
 */
function rootRows(db: Db, sel: EraseSelector, columns: string): Iterable<unknown[]> {
  const rows = (sql: string, ...args: unknown[]) => db.prepare(sql).raw().iterate(...args) as Iterable<unknown[]>;
  if ('ids' in sel) return rows(`SELECT ${columns} FROM memory WHERE id IN (SELECT value FROM json_each(?))`, JSON.stringify(sel.ids));
  if ('user' in sel) {
    // The brief's table has no user column: a per-user store's subject names the person. A user_id column wins.
    return memoryColumns(db).has('user_id') ? rows(`SELECT ${columns} FROM memory WHERE user_id = ?`, sel.user) : rows(`SELECT ${columns} FROM memory WHERE subject = ?`, sel.user);
  }
  return rows(`SELECT ${columns} FROM memory WHERE instr(lower(subject), lower(?)) > 0 OR instr(lower(fact), lower(?)) > 0`, sel.subject, sel.subject);
}

/** The ids of the rows the selector names (before their cascade), held as bytes (a StringList): an erase can name 100,000. */
function wardenRoots(db: Db, sel: EraseSelector): StringList {
  const out = new StringList();
  for (const [id] of rootRows(db, sel, 'id')) out.push(String(id));
  return out;
}

/**
 * A dry run's roots, kept for the real erase that follows on the same connection (src/erase/erase.ts plans, scrubs the
 * state db, then erases). They are used only while nothing can have changed the store since: no other connection
 * committed (data_version) and this one changed no row (total_changes). Otherwise the roots are looked up again.
 */
interface Plan {
  selector: string;
  roots: StringList;
  version: string;
  /** What the plan found to name only the erased rows, if a record made it look (those records are scrubbed already). */
  onlyTheirs: () => ReadonlySet<string> | undefined;
}
const plans = new WeakMap<Db, Plan>();
const versionOf = (db: Db) => `${String(db.pragma('data_version', { simple: true }))}/${String(db.prepare('SELECT total_changes()').pluck().get())}`;
const selectorKey = (db: Db, sel: EraseSelector) => JSON.stringify([sel, memoryColumns(db).has('user_id')]);

/**
 * The id and text of every row the deletes remove, the cascade included, captured as it goes (a TEMP trigger, this
 * connection only, like the deletes' own capture in delete.ts; TEMP objects are in memory, never in a file): the
 * texts are those of the rows deleted, even a row the agent changed or added after the plan, without reading the rows
 * a second time before the deletes. Read and emptied after each commit.
 */
const ROW_CAPTURE = `
CREATE TEMP TABLE IF NOT EXISTS warden_erased_row (id, fact, subject, source);
CREATE TEMP TRIGGER IF NOT EXISTS warden_erase_row AFTER DELETE ON main.memory BEGIN
  INSERT INTO temp.warden_erased_row VALUES (OLD.id, OLD.fact, OLD.subject, OLD.source);
END;`;
const ROW_CAPTURE_DROP = `DROP TRIGGER IF EXISTS temp.warden_erase_row; DROP TABLE IF EXISTS temp.warden_erased_row;`;

/**
 * The texts of the rows a plan names, read from the store when a consumer asks (ROOTS_AHEAD rows at a time), not
 * held: until the deletes the store has them. The real erase captures the texts of what it deletes (ROW_CAPTURE). A
 * row gone since the plan is not read; one changed since is read as it is now.
 */
class StoredTexts implements Strings {
  constructor(private readonly db: Db, private readonly ids: StringList) {}

  get length(): number {
    return this.ids.length;
  }

  slice(start = 0, end = this.ids.length): string[] {
    const read = this.db.prepare(`SELECT fact FROM memory WHERE id IN (SELECT value FROM json_each(?))`).pluck();
    const out: string[] = [];
    for (let i = Math.max(0, start); i < Math.min(end, this.ids.length); i += ROOTS_AHEAD) {
      for (const fact of read.iterate(JSON.stringify(this.ids.slice(i, Math.min(end, i + ROOTS_AHEAD))))) if (typeof fact === 'string') out.push(fact);
    }
    return out;
  }

  *[Symbol.iterator](): Iterator<string> {
    for (let i = 0; i < this.ids.length; i += ROOTS_AHEAD) yield* this.slice(i, i + ROOTS_AHEAD);
  }
}

export async function eraseWarden(store: StoreHandle, sel: EraseSelector, dryRun: boolean, opts: Omit<LayoutEraseOptions, 'selector' | 'dryRun'>): Promise<Erased> {
  const db = store.db;
  const key = selectorKey(db, sel);
  const plan = plans.get(db);
  plans.delete(db);
  if (dryRun) {
    // The rows the deletes will take, read once, row by row: their ids and fields (their texts only when asked:
    // StoredTexts). The roots come with their columns from the scan that finds them; their cascade (the older
    // versions whose supersede chain leads to one of them, as ON DELETE CASCADE follows it) from the supersede
    // index, ROOTS_AHEAD ids at a time, each row once: no row is looked up again by its id, and no list of every
    // root is made into one JSON parameter.
    const roots = new StringList();
    const taken = new Taken();
    const rowids: number[] = [];
    const take = ([id, rowid, subject, source]: unknown[]) => {
      taken.ids.push(id as string);
      rowids.push(rowid as number);
      taken.addFields(subject, source);
    };
    for (const row of rootRows(db, sel, 'id, rowid, subject, source')) {
      if (roots.length % ROOTS_AHEAD === 0) pollYoungGeneration();
      roots.push(String(row[0]));
      // An id that is not text (NULL, a blob) names no row to the deletes, which find their rows by id.
      if (typeof row[0] === 'string') take(row);
    }
    const children = db.prepare(`SELECT id, rowid, subject, source FROM memory WHERE superseded_by IN (SELECT value FROM json_each(?))`).raw();
    // Rows found join the list behind the ids being asked about, and are asked about in their turn.
    for (let asked = 0; asked < taken.ids.length; ) {
      pollYoungGeneration();
      const batch = taken.ids.slice(asked, asked + ROOTS_AHEAD);
      asked += batch.length;
      for (const row of children.iterate(JSON.stringify(batch)) as Iterable<unknown[]>) {
        if (typeof row[0] === 'string' && !taken.ids.has(row[0])) take(row);
      }
    }
    const { ids } = taken;
    const { fields, found } = fieldsOf(db, taken.byColumn, () => `[${rowids.join(',')}]`);
    plans.set(db, { selector: key, roots, version: versionOf(db), onlyTheirs: found });
    const texts = new StoredTexts(db, ids);
    const strayPoints = opts.plan ? 0 : await sweepStray(store, sel, texts, opts, true);
    return { ids, counts: { rows: ids.length, cascaded: ids.length - roots.length, strayPoints }, texts, fields };
  }
  const roots = plan && plan.selector === key && plan.version === versionOf(db) ? plan.roots : wardenRoots(db, sel);
  const counts: Record<string, number> = { rows: 0, cascaded: 0, strayPoints: 0 };
  if (roots.length === 0) return { ids: [], counts, texts: [] };
  // TEMP objects in memory, as the deletes' own (delete.ts); temp_store can only change while there are none.
  if (db.prepare(`SELECT count(*) FROM temp.sqlite_schema`).pluck().get() === 0) db.pragma('temp_store = MEMORY');
  db.exec(ROW_CAPTURE);
  // Only the ids and texts of what went (and their fields' distinct values): memory held per erased row is its id and
  // its text, as bytes.
  const taken = new Taken();
  const takeRows = db.prepare(`SELECT id, fact, subject, source FROM temp.warden_erased_row`).raw();
  const clearRows = db.prepare(`DELETE FROM temp.warden_erased_row`);
  const take = () => {
    taken.read(takeRows);
    clearRows.run();
  };
  try {
    clearRows.run();
    const afterCommit = () => {
      take();
      opts.afterCommit?.();
    };
    // Short transactions however many rows the selector names: the agent keeps writing meanwhile. Each call is
    // given the next ROOTS_AHEAD roots only (it takes what its time budget allows): handing it all those left made
    // every call serialise them all again, quadratic in the number erased.
    opts.progress?.start('erase', roots.length, 'rows');
    for (let i = 0; i < roots.length; ) {
      // No row objects back (rows: 0): the capture has what went.
      const step = await deleteRoots(db, roots.slice(i, i + ROOTS_AHEAD), { vectors: store.vectors, budget: { ms: ERASE_BATCH_MS, chunk: 100 }, afterCommit, rows: 0 });
      i += step.consumed;
      opts.progress?.set(i);
    }
    opts.progress?.done();
    take(); // every commit was read already; nothing is left behind if one was not
  } finally {
    db.exec(ROW_CAPTURE_DROP);
  }
  const { ids: deleted, texts } = taken;
  const { fields } = fieldsOf(db, taken.byColumn, () => '[]', plan && plan.selector === key ? plan.onlyTheirs() : undefined);
  counts.rows = deleted.length;
  counts.cascaded = deleted.length - roots.length;
  counts.strayPoints = await sweepStray(store, sel, texts, opts, false);
  return { ids: deleted, counts, texts, fields };
}

/**
 * The points still holding an erased text once the rows and their own points are gone, deleted (`dryRun`: counted,
 * none deleted, before the rows go). A point that belongs to a row in the store stays, even if it repeats an erased
 * text word for word: after the deletes that is a row the erase left; before them (a dry run) it is also an erased
 * row, whose points the deletes take by row id, not the sweep.
 */
async function sweepStray(store: StoreHandle, sel: EraseSelector, texts: Iterable<string>, opts: EraseOptions, dryRun: boolean): Promise<number> {
  const points = pointsOf(store, opts);
  if (!points || !store.config.qdrant) return 0;
  const vectors = store.vectors ?? rowVectorsFor(store.config)!;
  const exists = store.db.prepare(`SELECT 1 FROM memory WHERE id = ?`);
  const keep = (p: Mem0Point) => vectors.rowIdsOf({ id: p.id, payload: p.payload }).some((id) => exists.get(id) !== undefined);
  return sweepCollections(points, store.config.qdrant.collections, new Set(), texts, 'subject' in sel ? sel.subject : undefined, 256, keep, dryRun ? { gone: new Set() } : undefined);
}

const FIELD_COLUMNS = ['subject', 'source'] as const;

/**
 * What the erase keeps of the rows it takes, row by row: their ids and texts (as bytes), and each field column's
 * distinct values. No row objects are kept.
 */
class Taken {
  readonly ids = new StringList();
  readonly texts = new StringList({ packed: true });
  readonly byColumn: Set<string>[] = FIELD_COLUMNS.map(() => new Set<string>());
  /** `rows`: a statement in raw mode (rows as arrays: id, fact, subject, source). */
  read(rows: { iterate(...args: unknown[]): Iterable<unknown> }): void {
    for (const [id, fact, subject, source] of rows.iterate() as Iterable<unknown[]>) {
      this.ids.push(String(id));
      if (typeof fact === 'string') this.texts.push(fact);
      this.addFields(subject, source);
    }
  }
  addFields(...values: unknown[]): void {
    for (let i = 0; i < FIELD_COLUMNS.length; i++) {
      const v = values[i];
      if (typeof v === 'string' && v !== '') this.byColumn[i]!.add(v);
    }
  }
}

/**
 * The subjects and sources of these rows, and which of them no other row of the store has (`excluded` leaves rowids
 * out, for a plan: rows still there that the erase takes): they name only the erased memories, so a record quoting
 * one (a drift result naming a source's path) is theirs. One that other rows share ("user message") names nobody in
 * particular and stays.
 *
 * Without an index on subject or source, which the store need not have and erase does not add, telling them apart
 * is a scan of the table. It is made only when a record quotes one of the values (src/erase/state.ts asks), once for
 * both columns, and stops as soon as every value has been seen on another row. The real erase keeps what its plan
 * found to name only those rows (the records quoting them are scrubbed already) and asks about the others alone.
 */
function fieldsOf(db: Db, byColumn: readonly ReadonlySet<string>[], excluded: () => string, planned?: ReadonlySet<string>): { fields: ErasedFields; found: () => ReadonlySet<string> | undefined } {
  const values = [...new Set(byColumn.flatMap((vs) => [...vs]))];
  let answer: ReadonlySet<string> | undefined;
  const fields: ErasedFields = {
    values,
    onlyTheirs() {
      if (answer) return answer;
      const kept = planned ?? new Set<string>();
      const ask = byColumn.map((vs) => new Set([...vs].filter((v) => !kept.has(v))));
      const shared = sharedValues(db, ask, excluded);
      answer = new Set(values.filter((v) => kept.has(v) || ask.some((vs, i) => vs.has(v) && !shared[i]!.has(v))));
      return answer;
    },
  };
  return { fields, found: () => answer };
}

/**
 * Of each column's values, those some row not in `excluded` has: one pass over the table for both columns, each
 * pair of values reported once (DISTINCT) as it is first met, ended as soon as every value has been met.
 */
function sharedValues(db: Db, ask: readonly ReadonlySet<string>[], excluded: () => string): Set<string>[] {
  const shared = ask.map(() => new Set<string>());
  let left = ask.reduce((n, vs) => n + vs.size, 0);
  if (left === 0) return shared;
  const inList = (i: number) => `${FIELD_COLUMNS[i]} IN (SELECT value FROM json_each(@v${i}))`;
  const sql = `SELECT DISTINCT ${FIELD_COLUMNS.map((c, i) => `iif(${inList(i)}, ${c}, NULL)`).join(', ')} FROM memory
    WHERE (${FIELD_COLUMNS.map((_, i) => inList(i)).join(' OR ')}) AND rowid NOT IN (SELECT value FROM json_each(@excluded))`;
  const params = { excluded: excluded(), ...Object.fromEntries(ask.map((vs, i) => [`v${i}`, JSON.stringify([...vs])])) };
  for (const row of db.prepare(sql).raw().iterate(params) as Iterable<unknown[]>) {
    row.forEach((v, i) => {
      if (typeof v === 'string' && ask[i]!.has(v) && !shared[i]!.has(v)) {
        shared[i]!.add(v);
        left -= 1;
      }
    });
    if (left === 0) break; // the statement is reset: the rest of the table is not read
  }
  return shared;
}

function pointsOf(store: StoreHandle, opts: EraseOptions): PointStore | undefined {
  if (opts.points) return opts.points;
  return store.vectors || store.config.qdrant ? VECTOR_STORES.qdrant({ open: store.vectors, qdrant: store.config.qdrant }) : undefined;
}

