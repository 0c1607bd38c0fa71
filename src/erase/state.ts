import { truncateWal, type Db } from '../store/sqlite.js';
import { textFinder } from '../text/needles.js';
import { idMac } from '../snapshot/targets/holds.js';
import type { ErasedFields } from '../layouts/contract.js';
import { chunksOf, memberOf, type Strings } from '../text/string-list.js';

/**
 * Erase in memory-warden's own records (the state db): every copy of an erased memory that memory-warden made
 * itself. Drift verdicts of the erased memories (their evidence holds the text as verified and the proposed
 * replacement; pending ones are what `review list` and the digest show) and the ledger rows of what the prune
 * deleted for the person go whole. Everywhere else — job runs' results and errors, digest deliveries, another
 * memory's verdict quoting the text, a table a later feature adds — each value that holds an erased text (or the
 * subject, any ASCII case) is scrubbed: a JSON value keeps its shape with the holding strings replaced, any other
 * value is replaced whole; the run or delivery stays on record without its text. The receipts hold no text by
 * construction and are left alone.
 */
export const ERASED = '[erased]';

export interface Place {
  place: string;
  count: number;
}

export interface StateTarget {
  store: string;
  ids: Strings;
  texts: Strings;
  /** The erased rows' other fields: a record quoting one that names only them is scrubbed as for a text. */
  fields?: ErasedFields | undefined;
  subject?: string;
  /** erase --user: the person, whose records name them as a memory's subject (the digest's texts). */
  user?: string;
  /**
   * Ids earlier erases of the same person erased, known by their keyed hash only (erase-needles.ts), with the key:
   * a record about one of those memories written since (a verdict a drift task brought back late) goes whole too.
   */
  earlier?: { key: Buffer; macs: ReadonlySet<string> };
}

const OWN = new Set(['erase_receipts', 'erase_receipt_places']);

/**
 * Where memory-warden's tables keep content (free text, JSON): only these are scrubbed, never a key, a store or job
 * name or a status, so `--subject agent` cannot rename every record of the store `agent`. A table added later is
 * read the same way minus its indexed columns (keys, names), so a feature that forgets to list itself here is still
 * covered.
 */
const CONTENT: Record<string, string[]> = {
  job_runs: ['result', 'error'],
  drift_verdicts: ['evidence'], // resolution is confirmed, deleted, superseded:<id>, expires:<time>
  digest_deliveries: ['response', 'error', 'summary'],
  warden_deletions: [],
  erase_needles: [], // keyed hashes only
  erased_snapshots: [], // snapshot names and times
  erase_key: [], // the erase key's id (src/erase/key.ts)
  state_compaction: [], // why a step asked for the file to be compacted (src/state/migrate.ts)
  queue_use: [], // Redis key prefixes and times (src/erase/redis.ts)
  digest_texts: ['subject', 'text'], // whole rows go first (below); this catches a quote in another memory's text
};

function contentColumns(db: Db, table: string): string[] {
  const known = CONTENT[table];
  if (known) return known;
  const ddl = (db.prepare(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`).get(table) as { sql: string | null } | undefined)?.sql ?? '';
  if (/WITHOUT\s+ROWID/i.test(ddl)) return []; // the scrub goes by rowid; no table of memory-warden's is one
  const indexed = new Set(
    (db.prepare(`SELECT name FROM pragma_index_list(?)`).all(table) as { name: string }[])
      .flatMap((i) => (db.prepare(`SELECT name FROM pragma_index_info(?)`).all(i.name) as { name: string | null }[]).map((c) => c.name)),
  );
  const columns = db.prepare(`SELECT name, pk FROM pragma_table_info(?)`).all(table) as { name: string; pk: number }[];
  return columns.filter((c) => c.pk === 0 && !indexed.has(c.name)).map((c) => c.name);
}

const MIN_TEXT = 4;
/** Erased ids per statement that takes records about them whole. */
const ID_CHUNK = 4096;
/**
 * A quote of an erased text is found by any WINDOW consecutive characters of it, windows starting every STEP: a
 * quote of WINDOW + STEP characters or more, cut from the start (an error's clip at 40) or from the middle (a
 * reason quoting what a page said), holds a whole window.
 */
const WINDOW = 24;
const STEP = 12;

/**
 * The form both sides are compared in: JSON escapes (`\u00e9`, `\"`, `\/`) and percent-encoding (`%C3%A9%20`)
 * decoded, NFKC, lower case. A record can hold a text in any of them (evidence is JSON inside JSON, a URL quotes
 * the text it asked about, an error repeats it in capitals).
 */
function folded(text: string): string {
  const unescaped = text.replace(/\\(u[0-9a-fA-F]{4}|["\\/bfnrt])/g, (_, e: string) =>
    e[0] === 'u' ? String.fromCharCode(parseInt(e.slice(1), 16)) : ({ b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' } as Record<string, string>)[e] ?? e);
  const decoded = unescaped.replace(/(?:%[0-9a-fA-F]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run;
    }
  });
  return decoded.normalize('NFKC').toLowerCase();
}

/**
 * The windows of a folded text that a quote of it holds one of (the whole text when it is no longer than one): a
 * path of 30 characters quoted without its end is found by its first window.
 */
function windows(t: string): string[] {
  const chars = [...t];
  if (chars.length <= WINDOW) return [t];
  const out: string[] = [];
  for (let i = 0; i + WINDOW <= chars.length; i += STEP) out.push(chars.slice(i, i + WINDOW).join(''));
  out.push(chars.slice(-WINDOW).join(''));
  return out;
}

/** One pass over a folded value (and its words) for every window of every text (src/text/needles.ts). */
function finderOf(texts: Iterable<string>): (v: string) => boolean {
  const needles = new Set<string>();
  for (const t of texts) for (const form of [folded(t), spaced(folded(t))]) for (const w of windows(form)) needles.add(w);
  return textFinder([...needles].filter((t) => t.length >= MIN_TEXT));
}

/** Texts per finder when the values to test are known first (TextMatcher.prepare): memory bounded by this, not by the erase. */
const CHUNK_TEXTS = 4_000;

/** textMatcher's answer, with `prepare`: the values it will be asked about, looked up ahead a chunk of texts at a time. */
export interface TextMatcher {
  (v: string): boolean;
  /**
   * Answers for these values, found with the erased texts taken CHUNK_TEXTS at a time (each chunk's finder dropped
   * before the next is built): an erase of 100,000 memories held every window of every text at once, about 3 KB a
   * memory (417 MB at 10M rows, 1% erased). A value asked about later that was not given here is still answered, by
   * the whole finder built then.
   */
  prepare(values: Iterable<string>): void;
}

/**
 * Whether a string holds an erased text: whole or quoted in part (any WINDOW characters of it), as written, JSON-
 * escaped, percent-encoded or in another case; or a field of the erased rows that names only them (`fields`); or
 * (for --subject) the subject.
 *
 * The fields are found as the texts are, in two steps: any of them first; only when one is there, which of them name
 * only the erased rows, asked of the store once (ErasedFields.onlyTheirs), and those looked for again.
 */
export function textMatcher(texts: Strings, subject?: string, fields?: ErasedFields): TextMatcher {
  // Every text at once in one pass over the value. Indexed at the first value to test, so a state db without
  // content pays nothing for it, however many texts.
  let holdsText: ((v: string) => boolean) | undefined;
  let holdsField: ((v: string) => boolean) | undefined;
  let holdsTheirs: ((v: string) => boolean) | undefined;
  const known = new Map<string, boolean>(); // prepare's answers about the texts
  const subjectForm = subject === undefined ? '' : folded(subject);
  const subjectWords = spaced(subjectForm);
  const some = (ts: Iterable<string>) => {
    for (const t of ts) if (folded(t).length >= MIN_TEXT) return true;
    return false;
  };
  // Asked at the first value to test: the texts may be read from the store (a plan's), and a state db without
  // content needs none of them.
  let someText: boolean | undefined;
  const anyText = () => (someText ??= some(texts));
  const anyField = fields !== undefined && some(fields.values);
  const inTexts = (v: string, f: string, words: string) => {
    const k = known.get(v);
    if (k !== undefined) return k;
    holdsText ??= finderOf(texts);
    return holdsText(f) || holdsText(words);
  };
  const matcher = (v: string) => {
    const f = folded(v);
    const words = spaced(f);
    if (anyText() && inTexts(v, f, words)) return true;
    if (anyField) {
      holdsField ??= finderOf(fields.values);
      if (holdsField(f) || holdsField(words)) {
        holdsTheirs ??= finderOf(fields.onlyTheirs());
        if (holdsTheirs(f) || holdsTheirs(words)) return true;
      }
    }
    if (subjectForm === '') return false;
    return f.includes(subjectForm) || (subjectWords.length >= MIN_TEXT && words.includes(subjectWords));
  };
  const prepare = (values: Iterable<string>) => {
    if (holdsText) return;
    const open = new Map<string, [string, string]>();
    for (const v of values) {
      if (known.has(v) || open.has(v)) continue;
      const f = folded(v);
      open.set(v, [f, spaced(f)]);
    }
    if (open.size === 0 || !anyText()) return;
    for (let i = 0; i < texts.length && open.size > 0; i += CHUNK_TEXTS) {
      const finder = finderOf(texts.slice(i, i + CHUNK_TEXTS));
      for (const [v, [f, words]] of open) {
        if (finder(f) || finder(words)) {
          known.set(v, true);
          open.delete(v);
        }
      }
    }
    for (const v of open.keys()) known.set(v, false);
  };
  return Object.assign(matcher, { prepare });
}

/**
 * Words only: `zanthe quillory` is in `/home/zanthe-quillory/` and in `Zanthe_Quillory`. A record may join the
 * words of a subject or a text with any separator (a path, a slug, a user name, a log line's own punctuation).
 */
function spaced(f: string): string {
  return f.replace(/[^\p{L}\p{N}]+/gu, ' ').trim();
}

/**
 * Whether a string is an erased id or names one among its words (`row u1a locked`, `pruned u1a and u10a`), in any
 * of the forms a text takes (`ids` folded: JSON-escaped, percent-encoded, another case).
 */
function namesId(raw: string, ids: ErasedIds): boolean {
  if (ids.size === 0) return false;
  if (ids.has(raw)) return true;
  const v = folded(raw);
  if (ids.has(v)) return true;
  // Among words, only ids of MIN_TEXT characters or more: an id like `7` would take every record with a 7 in it.
  return v.split(/[^\p{L}\p{N}_.:-]+/u).some((word) => {
    const w = word.replace(/[.:]+$/, '');
    return w.length >= MIN_TEXT && ids.has(w);
  });
}

/**
 * The erased ids as namesId asks about them: each as it is and folded. Held as the erase's own list (no Set of every
 * id), with the few whose folded form differs beside it.
 */
interface ErasedIds {
  size: number;
  has(s: string): boolean;
  /** The folded forms that differ from their id (few: ids are seldom escaped or in capitals). */
  other: ReadonlySet<string>;
}

function erasedIds(ids: Strings): ErasedIds {
  const listed = memberOf(ids);
  const other = new Set<string>();
  for (const id of ids) {
    const f = folded(id);
    if (f !== id) other.add(f);
  }
  return { size: ids.length, has: (s) => listed(s) || other.has(s), other };
}

const NO_IDS: ErasedIds = { size: 0, has: () => false, other: new Set() };

/** Every string of a JSON value that holds an erased text or is an erased id becomes ERASED; null if none did. */
function scrubJson(value: unknown, holds: (s: string) => boolean, ids: ErasedIds): { value: unknown; hit: boolean } {
  if (typeof value === 'string') return holds(value) || namesId(value, ids) ? { value: ERASED, hit: true } : { value, hit: false };
  if (Array.isArray(value)) {
    const parts = value.map((v) => scrubJson(v, holds, ids));
    return { value: parts.map((p) => p.value), hit: parts.some((p) => p.hit) };
  }
  if (value && typeof value === 'object') {
    let hit = false;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const r = scrubJson(v, holds, ids);
      // A key can hold text too (a map keyed by fact): the entry goes.
      if (holds(k)) hit = true;
      else out[k] = r.value;
      hit ||= r.hit;
    }
    return { value: out, hit };
  }
  return { value, hit: false };
}

function parseJson(v: string): unknown {
  const c = v.trimStart()[0];
  if (c !== '{' && c !== '[') return undefined;
  try {
    return JSON.parse(v);
  } catch {
    return undefined;
  }
}

/** The scrubbed form of one value, or null when it holds nothing erased. */
export function scrubValue(v: string, holds: (s: string) => boolean, ids: ErasedIds = NO_IDS): string | null {
  const json = parseJson(v);
  if (json !== undefined) {
    const r = scrubJson(json, holds, ids);
    return r.hit ? JSON.stringify(r.value) : null;
  }
  return holds(v) || namesId(v, ids) ? ERASED : null;
}

const q = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * Scrub the state db for one erase (see above). With dryRun, only counts. Ids are matched only where a record
 * names its store (drift verdicts, the ledger, job runs' results): an id alone means nothing in another store.
 */
export function scrubState(db: Db, t: StateTarget, dryRun: boolean): Place[] {
  const holds = textMatcher(t.texts, t.subject, t.fields);
  const ids = erasedIds(t.ids);
  const places: Place[] = [];
  const add = (place: string, count: number) => {
    const p = places.find((x) => x.place === place);
    if (p) p.count += count;
    else places.push({ place, count });
  };
  db.function('warden_erased_text', { deterministic: true }, (v: unknown) => (typeof v === 'string' && holds(v) ? 1 : 0));
  const earlier = t.earlier;
  db.function('warden_erased_earlier', { deterministic: true }, (v: unknown) => (earlier && v !== null && earlier.macs.has(idMac(earlier.key, String(v))) ? 1 : 0));
  const tables = (db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`).all() as { name: string }[]).map((r) => r.name);
  // The ids (and their other folded forms) as JSON lists of ID_CHUNK, made once for the tables that ask: about ten
  // bytes an id while the scrub runs.
  let lists: string[] | undefined;
  const idLists = () => {
    if (lists) return lists;
    lists = [];
    for (const chunk of chunksOf(t.ids, ID_CHUNK)) lists.push(JSON.stringify(chunk));
    if (ids.other.size > 0) lists.push(JSON.stringify([...ids.other]));
    return lists;
  };
  // Records taken whole: those `where` names (with `args`) and those about an erased id, the ids asked ID_CHUNK at a
  // time (an erase of 100,000 memories made one JSON list of them all, twice: every id and its folded form); a dry run
  // counts each record once however many of its clauses it meets.
  const takeWhole = (table: string, where: string | undefined, args: unknown[]) => {
    const seen = new Set<number>();
    let n = 0;
    const take = (sql: string, ...params: unknown[]) => {
      if (!dryRun) n += db.prepare(`DELETE FROM ${table} WHERE ${sql}`).run(...params).changes;
      else for (const rid of db.prepare(`SELECT rowid FROM ${table} WHERE ${sql}`).pluck().iterate(...params)) seen.add(rid as number);
    };
    if (where) take(where, ...args);
    // The store's records here, when fewer than the ids, are each looked up among the ids (ids.has: the same ids and
    // folded forms the lists hold); else the ids are asked for a list at a time. Each list is made into an index by
    // SQLite however few records the table has (a tenth of a second for 100,000 ids, on an empty table too).
    const asked = ids.size + ids.other.size;
    const few = asked > 0 && (db.prepare(`SELECT count(*) FROM (SELECT 1 FROM ${table} WHERE store = ? LIMIT ?)`).pluck().get(t.store, asked) as number) < asked;
    if (few) {
      const theirs: number[] = [];
      for (const [rid, id] of db.prepare(`SELECT rowid, memory_id FROM ${table} WHERE store = ?`).raw().iterate(t.store) as Iterable<[number, unknown]>) {
        if (typeof id === 'string' && ids.has(id)) theirs.push(rid);
      }
      for (let i = 0; i < theirs.length; i += ID_CHUNK) take(`rowid IN (SELECT value FROM json_each(?))`, JSON.stringify(theirs.slice(i, i + ID_CHUNK)));
    } else for (const list of idLists()) take(`store = ? AND memory_id IN (SELECT value FROM json_each(?))`, t.store, list);
    add(`state:${table}`, dryRun ? seen.size : n);
  };
  const run = () => {
    // Whole records about the erased memories.
    const byEarlier = earlier && earlier.macs.size > 0 ? 'store = ? AND warden_erased_earlier(memory_id)' : undefined;
    for (const table of ['drift_verdicts', 'warden_deletions']) {
      if (tables.includes(table)) takeWhole(table, byEarlier, [t.store]);
    }
    // The digest's record of what memories said (src/digest/texts.ts) holds their texts, older ones included that
    // the store no longer has: every text of an erased memory or of the person goes whole, and any record in any
    // store that holds an erased text or the subject.
    if (tables.includes('digest_texts')) {
      const where = `(store = ? AND (${byEarlier ? 'warden_erased_earlier(memory_id) OR ' : ''}subject = ?)) OR warden_erased_text(text) OR warden_erased_text(subject)`;
      takeWhole('digest_texts', where, [t.store, t.user ?? null]);
    }
    // Job runs of this store name its memories by id in their results (prune lists what it deleted) and errors;
    // the evidence of another memory's verdict can name one too (a drift result quoting the row it superseded).
    const byStore: [table: string, col: string][] = [['job_runs', 'result'], ['job_runs', 'error'], ['drift_verdicts', 'evidence']];
    for (const [table, col] of ids.size > 0 ? byStore.filter(([x]) => tables.includes(x)) : []) {
      const rows = db.prepare(`SELECT id, ${col} AS v FROM ${table} WHERE store = ? AND ${col} IS NOT NULL`).all(t.store) as { id: number; v: string }[];
      const set = db.prepare(`UPDATE ${table} SET ${col} = ? WHERE id = ?`);
      for (const r of rows) {
        if (dryRun && holds(r.v)) continue; // counted by the pass below
        const s = scrubValue(r.v, holds, ids);
        if (s === null) continue;
        if (!dryRun) set.run(s, r.id);
        add(`state:${table}.${col}`, 1);
      }
    }
    // The content columns everywhere else.
    for (const table of tables.filter((x) => !OWN.has(x))) {
      for (const col of contentColumns(db, table)) {
        const rows = db.prepare(`SELECT rowid AS rid, ${q(col)} AS v FROM ${q(table)} WHERE warden_erased_text(${q(col)})`).all() as { rid: number; v: string }[];
        add(`state:${table}.${col}`, dryRun ? rows.length : 0); // listed even when nothing was there: it was looked at
        if (dryRun || rows.length === 0) continue;
        const set = db.prepare(`UPDATE ${q(table)} SET ${q(col)} = ? WHERE rowid = ?`);
        let n = 0;
        for (const r of rows) {
          try {
            set.run(scrubValue(r.v, holds) ?? ERASED, r.rid);
            n += 1;
          } catch {
            // A CHECK refused the placeholder: a column of fixed values (a status), never content. Left as it is.
          }
        }
        add(`state:${table}.${col}`, n);
      }
    }
  };
  // Many texts: the values the passes will test, read first, are looked up a chunk of texts at a time (bounded
  // memory); inside the write transaction, so that the passes meet no value written since.
  const prepared = () => {
    if (t.texts.length > CHUNK_TEXTS) holds.prepare(stateValues(db, tables, ids.size > 0 ? t.store : null));
  };
  if (dryRun) {
    prepared();
    run();
  } else {
    db.transaction(() => {
      prepared();
      run();
    }).immediate();
  }
  return places;
}

/**
 * Every string scrubState may test: the content columns' values and, in a JSON value, each string and key in it
 * (scrubJson tests those one by one); with `store`, also the job runs' and verdicts' columns it reads by store.
 */
function stateValues(db: Db, tables: readonly string[], store: string | null): Set<string> {
  const out = new Set<string>();
  const add = (v: unknown) => {
    if (typeof v !== 'string' || out.has(v)) return;
    out.add(v);
    const walk = (x: unknown): void => {
      if (typeof x === 'string') out.add(x);
      else if (Array.isArray(x)) x.forEach(walk);
      else if (x && typeof x === 'object') {
        for (const [k, y] of Object.entries(x)) {
          out.add(k);
          walk(y);
        }
      }
    };
    const json = parseJson(v);
    if (json !== undefined) walk(json);
  };
  const read = (sql: string, ...args: unknown[]) => {
    for (const v of db.prepare(sql).pluck().iterate(...args)) add(v);
  };
  if (store !== null) {
    for (const [table, col] of [['job_runs', 'result'], ['job_runs', 'error'], ['drift_verdicts', 'evidence']] as const) {
      if (tables.includes(table)) read(`SELECT ${col} FROM ${table} WHERE store = ? AND ${col} IS NOT NULL`, store);
    }
  }
  for (const table of tables.filter((x) => !OWN.has(x))) {
    for (const col of contentColumns(db, table)) read(`SELECT ${q(col)} FROM ${q(table)} WHERE ${q(col)} IS NOT NULL`);
  }
  return out;
}

/**
 * secure_delete zeroed what the scrub freed; VACUUM drops the free pages, the checkpoint empties the WAL. The VACUUM
 * streams every page once, through the connection's page cache and a temporary copy's cache of the same size: at
 * better-sqlite3's 16 MB each, an erase of 100,000 memories (whose id hashes the state db records) held 10 MB more
 * for it than one of 10,000. SQLite's default 2 MB each, for the VACUUM only.
 */
export function compactState(db: Db): { walTruncated: boolean } {
  const cache = db.pragma('cache_size', { simple: true }) as number;
  db.pragma(`cache_size = -${COMPACT_CACHE_KB}`);
  try {
    db.exec('VACUUM');
  } finally {
    db.pragma(`cache_size = ${cache}`);
  }
  return { walTruncated: truncateWal(db) };
}
const COMPACT_CACHE_KB = 2000;

/**
 * The scrub's test of one value, for memory-warden's records outside the state db (Redis: src/erase/redis.ts): as a
 * content column is tested (an erased text, a field of the erased rows, the subject), and, for a record of the
 * erased memories' store, as its job runs' results are (the erased ids too, in any form, among words).
 */
export function recordMatcher(t: Pick<StateTarget, 'ids' | 'texts' | 'fields' | 'subject' | 'earlier'>): (v: string, ofStore: boolean) => boolean {
  const holds = textMatcher(t.texts, t.subject, t.fields);
  const ids = erasedIds(t.ids);
  const earlier = t.earlier && t.earlier.macs.size > 0 ? t.earlier : undefined;
  // An id an earlier erase of the person erased, known by its keyed hash only, as a JSON string of the record (a
  // drift task's `memory.id`): the record of a job that was still queued then is found once it has run.
  const namesEarlier = (v: string) => {
    const json = parseJson(v);
    if (!earlier || json === undefined) return false;
    const walk = (x: unknown): boolean =>
      typeof x === 'string' ? earlier.macs.has(idMac(earlier.key, x))
        : Array.isArray(x) ? x.some(walk)
          : x !== null && typeof x === 'object' ? Object.values(x).some(walk) : false;
    return walk(json);
  };
  return (v, ofStore) => (ofStore ? scrubValue(v, holds, ids) !== null || namesEarlier(v) : holds(v));
}
