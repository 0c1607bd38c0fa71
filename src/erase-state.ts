import { truncateWal, type Db } from './store/sqlite.js';
import { asciiLower, textFinder } from './needles.js';

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
  ids: readonly string[];
  texts: readonly string[];
  subject?: string;
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
const PREFIX = 48;

/** The first `n` code points of `t` (a surrogate pair is never cut). */
function head(t: string, n: number): string {
  if (t.length <= n) return t;
  let count = 0;
  let end = 0;
  for (const ch of t) {
    if (count++ === n) break;
    end += ch.length;
  }
  return t.slice(0, end);
}

/** Whether a string holds an erased text: as written, JSON-escaped, or (for --subject) the subject in any case. */
export function textMatcher(texts: readonly string[], subject?: string): (v: string) => boolean {
  // A long text may be quoted cut short (an error message, a log line): its first PREFIX characters find it too.
  // A value holding the whole text (or its JSON escape) holds those too, so they are all that is looked for, every
  // text at once in one pass over the value (src/needles.ts). Indexed at the first value to test, so a state db
  // without content pays nothing for it, however many texts (30,000 took 15 MB and 0.2 s).
  let holdsText: ((v: string) => boolean) | undefined;
  const index = () => {
    const heads = new Set<string>();
    for (const t of texts) {
      const h = head(t, PREFIX);
      heads.add(h);
      heads.add(JSON.stringify(h).slice(1, -1));
    }
    return textFinder([...heads].filter((t) => t.length >= MIN_TEXT));
  };
  const folded = subject === undefined ? [] : [...new Set([subject, JSON.stringify(subject).slice(1, -1)].map(asciiLower))];
  if (!texts.some((t) => t.length >= MIN_TEXT || JSON.stringify(t).length - 2 >= MIN_TEXT) && folded.length === 0) return () => false;
  return (v) => (holdsText ??= index())(v) || (folded.length > 0 && folded.some((t) => asciiLower(v).includes(t)));
}

/** Every string of a JSON value that holds an erased text or is an erased id becomes ERASED; null if none did. */
function scrubJson(value: unknown, holds: (s: string) => boolean, ids: ReadonlySet<string>): { value: unknown; hit: boolean } {
  if (typeof value === 'string') return holds(value) || ids.has(value) ? { value: ERASED, hit: true } : { value, hit: false };
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
export function scrubValue(v: string, holds: (s: string) => boolean, ids: ReadonlySet<string> = new Set()): string | null {
  const json = parseJson(v);
  if (json !== undefined) {
    const r = scrubJson(json, holds, ids);
    return r.hit ? JSON.stringify(r.value) : null;
  }
  return holds(v) ? ERASED : null;
}

const q = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * Scrub the state db for one erase (see above). With dryRun, only counts. Ids are matched only where a record
 * names its store (drift verdicts, the ledger, job runs' results): an id alone means nothing in another store.
 */
export function scrubState(db: Db, t: StateTarget, dryRun: boolean): Place[] {
  const holds = textMatcher(t.texts, t.subject);
  const ids = new Set(t.ids);
  const idList = JSON.stringify([...ids]);
  const places: Place[] = [];
  const add = (place: string, count: number) => {
    const p = places.find((x) => x.place === place);
    if (p) p.count += count;
    else places.push({ place, count });
  };
  db.function('warden_erased_text', { deterministic: true }, (v: unknown) => (typeof v === 'string' && holds(v) ? 1 : 0));
  const tables = (db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`).all() as { name: string }[]).map((r) => r.name);
  const run = () => {
    // Whole records about the erased memories.
    const whole: [table: string, where: string][] = [
      ['drift_verdicts', `store = ? AND memory_id IN (SELECT value FROM json_each(?))`],
      ['warden_deletions', `store = ? AND memory_id IN (SELECT value FROM json_each(?))`],
    ];
    for (const [table, where] of whole) {
      if (!tables.includes(table)) continue;
      const sql = dryRun ? `SELECT count(*) AS n FROM ${table} WHERE ${where}` : `DELETE FROM ${table} WHERE ${where}`;
      add(`state:${table}`, dryRun ? (db.prepare(sql).get(t.store, idList) as { n: number }).n : db.prepare(sql).run(t.store, idList).changes);
    }
    // Job runs of this store name its memories by id in their results (prune lists what it deleted).
    if (tables.includes('job_runs') && ids.size > 0) {
      const rows = db.prepare(`SELECT id, result FROM job_runs WHERE store = ? AND result IS NOT NULL`).all(t.store) as { id: number; result: string }[];
      const set = db.prepare(`UPDATE job_runs SET result = ? WHERE id = ?`);
      for (const r of rows) {
        if (dryRun && holds(r.result)) continue; // counted by the pass below
        const s = scrubValue(r.result, holds, ids);
        if (s === null) continue;
        if (!dryRun) set.run(s, r.id);
        add('state:job_runs.result', 1);
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
  if (dryRun) run();
  else db.transaction(run).immediate();
  return places;
}

/** secure_delete zeroed what the scrub freed; VACUUM drops the free pages, the checkpoint empties the WAL. */
export function compactState(db: Db): { walTruncated: boolean } {
  db.exec('VACUUM');
  return { walTruncated: truncateWal(db) };
}
