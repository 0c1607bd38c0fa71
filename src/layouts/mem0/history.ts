import { randomUUID } from 'node:crypto';
import { tableExists, type Db } from '../../store/sqlite.js';
import { storeError } from '../../core/errors.js';
import { asciiLower } from '../../text/needles.js';

/**
 * mem0's change log, in either dialect: Python mem0's `history` or the TypeScript port's `memory_history`
 * (docs/mem0-layout.md). Everything here reads and writes rows exactly as mem0 would, never adds a column
 * (mem0 rebuilds a `history` table whose columns differ from its own), and orders events by rowid (insertion
 * order), because mem0's `created_at` is the memory's creation time even on DELETE rows.
 */
export interface HistoryDialect {
  table: 'history' | 'memory_history';
  oldText: 'old_memory' | 'previous_value';
  newText: 'new_memory' | 'new_value';
  event: 'event' | 'action';
  /** Python mem0 only. */
  hasActor: boolean;
  /** Python mem0 v3 keeps the last messages of each session here (raw conversation text). */
  hasMessages: boolean;
}

const PYTHON: Omit<HistoryDialect, 'hasMessages'> = { table: 'history', oldText: 'old_memory', newText: 'new_memory', event: 'event', hasActor: true };
const TYPESCRIPT: Omit<HistoryDialect, 'hasMessages'> = { table: 'memory_history', oldText: 'previous_value', newText: 'new_value', event: 'action', hasActor: false };

export function detectDialect(db: Db, path: string, wanted: 'auto' | 'history' | 'memory_history' = 'auto'): HistoryDialect {
  const hasMessages = tableExists(db, 'messages') && columnsOf(db, 'messages').has('content');
  const pick = (d: Omit<HistoryDialect, 'hasMessages'>): HistoryDialect => ({ ...d, hasMessages });
  if (wanted === 'history' || (wanted === 'auto' && tableExists(db, 'history'))) {
    if (!tableExists(db, 'history')) throw storeError(`${path}: no table "history" (not a mem0 history.db)`);
    return { ...pick(PYTHON), hasActor: columnsOf(db, 'history').has('actor_id') };
  }
  if (tableExists(db, 'memory_history')) return pick(TYPESCRIPT);
  throw storeError(`${path}: no table "${wanted === 'auto' ? 'history" or "memory_history' : wanted}" (not a mem0 history.db)`);
}

function columnsOf(db: Db, table: string): Set<string> {
  return new Set((db.prepare(`SELECT name FROM pragma_table_info(?)`).all(table) as { name: string }[]).map((r) => r.name));
}

export type Mem0Event = 'ADD' | 'UPDATE' | 'DELETE';

export interface LastEvent {
  memory_id: string;
  event: string;
}

/** The last event of each of these memories (absent: no history at all). */
export function lastEvents(db: Db, d: HistoryDialect, memoryIds: readonly string[]): Map<string, string> {
  if (memoryIds.length === 0) return new Map();
  // SQLite's bare column with max(): `event` comes from the row holding the greatest rowid of each group.
  const rows = db
    .prepare(`SELECT memory_id, ${d.event} AS event, max(rowid) FROM ${d.table}
              WHERE memory_id IN (SELECT value FROM json_each(?)) GROUP BY memory_id`)
    .all(JSON.stringify(memoryIds)) as LastEvent[];
  return new Map(rows.map((r) => [String(r.memory_id), String(r.event)]));
}

/**
 * Each memory's last event, in a TEMP table of this connection (never in mem0's file, which has no index on
 * memory_id): built in one pass over history, then looked up by page through its primary key. Without it, every
 * page of points would scan the whole history.
 */
export interface LastEventIndex {
  get(memoryIds: readonly string[]): Map<string, string>;
  /** Every memory whose history says it exists (last event not DELETE), streamed in memory_id order. */
  alive(): Generator<string>;
  drop(): void;
}

export function lastEventIndex(db: Db, d: HistoryDialect): LastEventIndex {
  const name = `temp.warden_mem0_last_${Math.random().toString(36).slice(2, 10)}`;
  db.exec(`CREATE TABLE ${name} (memory_id TEXT PRIMARY KEY, event TEXT) WITHOUT ROWID`);
  db.exec(`INSERT INTO ${name} (memory_id, event)
           SELECT memory_id, event FROM (SELECT memory_id, ${d.event} AS event, max(rowid) FROM ${d.table} WHERE memory_id IS NOT NULL GROUP BY memory_id)`);
  const lookup = db.prepare(`SELECT memory_id, event FROM ${name} WHERE memory_id IN (SELECT value FROM json_each(?))`);
  return {
    get(memoryIds) {
      if (memoryIds.length === 0) return new Map();
      return new Map((lookup.all(JSON.stringify(memoryIds)) as LastEvent[]).map((r) => [String(r.memory_id), String(r.event)]));
    },
    *alive() {
      for (const r of db.prepare(`SELECT memory_id FROM ${name} WHERE event IS NOT 'DELETE' ORDER BY memory_id`).iterate() as IterableIterator<{ memory_id: string }>) {
        yield String(r.memory_id);
      }
    },
    drop() {
      db.exec(`DROP TABLE IF EXISTS ${name}`);
    },
  };
}

export interface HistoryAdd {
  memory_id: string;
  text: string | null;
  created_at: string | null;
  actor_id: string | null;
  role: string | null;
}

/** ADD rows, oldest first (the digest filters them by instant: mem0 writes ISO text with offsets). */
export function addRows(db: Db, d: HistoryDialect): HistoryAdd[] {
  const actor = d.hasActor ? 'actor_id, role' : 'NULL AS actor_id, NULL AS role';
  return db
    .prepare(`SELECT memory_id, ${d.newText} AS text, created_at, ${actor} FROM ${d.table} WHERE ${d.event} = 'ADD' ORDER BY rowid`)
    .all() as HistoryAdd[];
}

export interface DeleteRecord {
  memory_id: string;
  old_text: string | null;
  created_at: string | null;
  updated_at: string;
  actor_id: string | null;
  role: string | null;
}

/**
 * The DELETE row mem0's `_delete_memory` writes (Python: uuid4 id, old text, created_at, updated_at = now,
 * is_deleted = 1, actor_id, role; TypeScript port: autoincrement id, old text, NULL times, is_deleted = 1).
 */
export function insertDeleteRow(db: Db, d: HistoryDialect, r: DeleteRecord): void {
  if (d.table === 'history') {
    const cols = d.hasActor ? ', actor_id, role' : '';
    const vals = d.hasActor ? ', @actor_id, @role' : '';
    db.prepare(`INSERT INTO history (id, memory_id, old_memory, new_memory, event, created_at, updated_at, is_deleted${cols})
                VALUES (@id, @memory_id, @old_text, NULL, 'DELETE', @created_at, @updated_at, 1${vals})`)
      .run({ id: randomUUID(), ...r });
  } else {
    db.prepare(`INSERT INTO memory_history (memory_id, previous_value, new_value, action, created_at, updated_at, is_deleted)
                VALUES (?, ?, NULL, 'DELETE', NULL, NULL, 1)`)
      .run(r.memory_id, r.old_text);
  }
}

/** Memory ids whose history text contains `needle` (case-insensitive, ASCII case folding as SQLite's lower()). */
export function memoryIdsMentioning(db: Db, d: HistoryDialect, needle: string): string[] {
  const rows = db
    .prepare(`SELECT DISTINCT memory_id FROM ${d.table}
              WHERE instr(lower(coalesce(${d.oldText}, '')), lower(?)) > 0 OR instr(lower(coalesce(${d.newText}, '')), lower(?)) > 0`)
    .all(needle, needle) as { memory_id: string }[];
  return rows.map((r) => String(r.memory_id));
}

/** Every text the history holds for these memories (erase uses them to look for copies in snapshots). */
export function historyTexts(db: Db, d: HistoryDialect, memoryIds: readonly string[]): string[] {
  if (memoryIds.length === 0) return [];
  const rows = db
    .prepare(`SELECT ${d.oldText} AS a, ${d.newText} AS b FROM ${d.table} WHERE memory_id IN (SELECT value FROM json_each(?))`)
    .all(JSON.stringify(memoryIds)) as { a: string | null; b: string | null }[];
  return rows.flatMap((r) => [r.a, r.b]).filter((t): t is string => typeof t === 'string' && t.length > 0);
}

export interface ScrubResult {
  scrubbed: number;
  deleteRowsAdded: number;
}

/**
 * Erase: blank the text (and, Python mem0, the actor) of every history row of these memories, and give each one
 * that history still shows alive a DELETE row without text, so mem0 and the integrity check both read a normal
 * delete. Event, times and ids stay: the log still says something existed and was erased, never what.
 */
export function scrubHistory(db: Db, d: HistoryDialect, memoryIds: readonly string[], now: string): ScrubResult {
  if (memoryIds.length === 0) return { scrubbed: 0, deleteRowsAdded: 0 };
  const ids = JSON.stringify(memoryIds);
  const actor = d.hasActor ? ', actor_id = NULL' : '';
  const scrubbed = db
    .prepare(`UPDATE ${d.table} SET ${d.oldText} = NULL, ${d.newText} = NULL${actor} WHERE memory_id IN (SELECT value FROM json_each(?))`)
    .run(ids).changes;
  let deleteRowsAdded = 0;
  const last = lastEvents(db, d, memoryIds);
  for (const [memoryId, event] of last) {
    if (event === 'DELETE') continue;
    insertDeleteRow(db, d, { memory_id: memoryId, old_text: null, created_at: null, updated_at: now, actor_id: null, role: null });
    deleteRowsAdded += 1;
  }
  return { scrubbed, deleteRowsAdded };
}

/** What scrubHistory would change, for a dry run: the rows it rewrites (every row of these memories, as its UPDATE) and the DELETE rows it adds. */
export function planScrubHistory(db: Db, d: HistoryDialect, memoryIds: readonly string[]): { historyRowsScrubbed: number; deleteRowsAdded: number } {
  if (memoryIds.length === 0) return { historyRowsScrubbed: 0, deleteRowsAdded: 0 };
  const rows = db.prepare(`SELECT count(*) AS n FROM ${d.table} WHERE memory_id IN (SELECT value FROM json_each(?))`).get(JSON.stringify(memoryIds)) as { n: number };
  const alive = [...lastEvents(db, d, memoryIds).values()].filter((event) => event !== 'DELETE').length;
  return { historyRowsScrubbed: Number(rows.n), deleteRowsAdded: alive };
}

/** `user_id=ID` as one component of mem0's session scope (`agent_id=..&run_id=..&user_id=..`). */
export function deleteMessages(db: Db, d: HistoryDialect, by: { userId?: string; text?: string }): number {
  if (!d.hasMessages) return 0;
  let n = 0;
  if (by.userId !== undefined) {
    const scope = `user_id=${by.userId}`;
    n += db
      .prepare(`DELETE FROM messages WHERE session_scope = ? OR session_scope LIKE ? ESCAPE '\\' OR session_scope LIKE ? ESCAPE '\\' OR session_scope LIKE ? ESCAPE '\\'`)
      .run(scope, `${escapeLike(scope)}&%`, `%&${escapeLike(scope)}`, `%&${escapeLike(scope)}&%`).changes;
  }
  if (by.text !== undefined) {
    n += db
      .prepare(`DELETE FROM messages WHERE instr(lower(coalesce(content, '')), lower(?)) > 0 OR instr(lower(coalesce(name, '')), lower(?)) > 0`)
      .run(by.text, by.text).changes;
  }
  return n;
}

/** Messages that deleteMessages would remove, for a dry run. */
export function countMessages(db: Db, d: HistoryDialect, by: { userId?: string; text?: string }): number {
  if (!d.hasMessages) return 0;
  const rows = db.prepare(`SELECT session_scope, content, name FROM messages`).all() as { session_scope: string | null; content: string | null; name: string | null }[];
  return rows.filter((r) => messageMatches(r, by)).length;
}

export function messageMatches(r: { session_scope: string | null; content: string | null; name: string | null }, by: { userId?: string; text?: string }): boolean {
  if (by.userId !== undefined && (r.session_scope ?? '').split('&').includes(`user_id=${by.userId}`)) return true;
  if (by.text !== undefined) {
    const t = asciiLower(by.text);
    return asciiLower(r.content ?? '').includes(t) || asciiLower(r.name ?? '').includes(t);
  }
  return false;
}


function escapeLike(s: string): string {
  return s.replace(/[\\%_]/g, (c) => `\\${c}`);
}
