import { existsSync } from 'node:fs';
import { openDatabase, journalMode, truncateWal, type Db } from '../../store/sqlite.js';
import { storeError } from '../../core/errors.js';
import type { Mem0Point, PointStore } from '../contract.js';

/**
 * The mem0 TypeScript SDK's own vector store (provider `memory`, its default): one SQLite file per collection,
 * each with `vectors(id TEXT PRIMARY KEY, vector BLOB, payload TEXT)` — the vector as raw float32, the payload as
 * JSON text. The memories are in `vector_store.db`, the entities in `vector_store_entities.db`. This is the
 * PointStore over those files, so every mem0 job runs on it as on Qdrant (docs/mem0-layout.md).
 *
 * A connection is opened per operation and closed after it: the agent's SDK holds its own connection all the
 * time, and a worker that keeps none open never holds a lock or a file descriptor between jobs. The file's
 * journal mode is the SDK's (rollback journal) and is never changed. Deletes run with secure_delete on, so a
 * deleted payload's text is zeroed in its page; `compact` then VACUUMs the files for erase.
 */
export interface SqliteVectorStore extends PointStore {
  /** The files that hold the collections, existing or not. */
  files(): string[];
  /** VACUUM every existing file (and truncate a WAL, should one exist): erased text leaves no free page behind. */
  compact(): Promise<void>;
  /**
   * Every point (but those in `skip`) loses `ids` from the lists its payload keeps under `keys`; one whose list under
   * a key it lost ids from is left empty is deleted. Read and written in one IMMEDIATE transaction of the file, so a
   * writer's change to a point between the read and the write cannot be undone by it (mem0's entity links).
   */
  removeFromLists(collection: string, keys: readonly string[], ids: readonly string[], skip: readonly string[]): Promise<{ removed: number; deleted: number }>;
}

interface Row {
  id: string;
  payload: string;
}

export function sqliteVectorStore(byCollection: Record<string, string>, busyTimeoutMs = 5000): SqliteVectorStore {
  const fileOf = (collection: string): string => {
    const f = byCollection[collection];
    if (f === undefined) throw storeError(`mem0 SQLite vector store: no file for collection "${collection}"`);
    return f;
  };
  const hasVectors = (path: string): boolean => {
    if (!existsSync(path)) return false;
    return withDb(path, busyTimeoutMs, (db) => db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vectors'`).get() !== undefined);
  };
  const run = <T>(collection: string, doing: string, fn: (db: Db) => T): T => {
    const path = fileOf(collection);
    if (!hasVectors(path)) throw storeError(`${path}: no table "vectors" (collection ${collection}: not a mem0 SQLite vector store)`);
    try {
      return withDb(path, busyTimeoutMs, fn);
    } catch (err) {
      if ((err as { kind?: string }).kind) throw err;
      throw storeError(`${doing} in ${path}: ${(err as Error).message}`, err);
    }
  };
  return {
    files: () => [...new Set(Object.values(byCollection))],
    async collections() {
      return Object.entries(byCollection).filter(([, path]) => hasVectors(path)).map(([c]) => c);
    },
    async scroll(collection, opts) {
      const rows = run(collection, `scroll ${collection}`, (db) =>
        db.prepare(`SELECT id, payload FROM vectors WHERE ? IS NULL OR id > ? ORDER BY id LIMIT ?`).all(offsetOf(opts.offset), offsetOf(opts.offset), opts.limit) as Row[]);
      const points = rows.map((r) => asPoint(r, opts.payload ?? true));
      return { points, next: rows.length === opts.limit ? rows[rows.length - 1]!.id : null };
    },
    async retrieve(collection, ids, payload = true) {
      if (ids.length === 0) return [];
      const rows = run(collection, `retrieve ${ids.length} point(s) from ${collection}`, (db) =>
        db.prepare(`SELECT id, payload FROM vectors WHERE id IN (SELECT value FROM json_each(?))`).all(JSON.stringify(ids)) as Row[]);
      return rows.map((r) => asPoint(r, payload));
    },
    async delete(collection, ids) {
      if (ids.length === 0) return;
      run(collection, `delete ${ids.length} point(s) from ${collection}`, (db) => {
        db.pragma('secure_delete = ON');
        db.prepare(`DELETE FROM vectors WHERE id IN (SELECT value FROM json_each(?))`).run(JSON.stringify(ids));
      });
    },
    async setPayload(collection, id, patch) {
      run(collection, `set payload of point ${id} in ${collection}`, (db) => {
        db.pragma('secure_delete = ON');
        db.transaction(() => {
          const row = db.prepare(`SELECT payload FROM vectors WHERE id = ?`).get(id) as { payload: string } | undefined;
          if (!row) return; // gone meanwhile: as Qdrant, nothing to set
          db.prepare(`UPDATE vectors SET payload = ? WHERE id = ?`).run(JSON.stringify({ ...parsePayload(row.payload), ...patch }), id);
        }).immediate();
      });
    },
    async removeFromLists(collection, keys, ids, skip) {
      const out = { removed: 0, deleted: 0 };
      if (ids.length === 0 || !hasVectors(fileOf(collection))) return out;
      const gone = new Set(ids), skipped = new Set(skip);
      run(collection, `remove ${ids.length} id(s) from the lists of ${collection}`, (db) => {
        db.pragma('secure_delete = ON');
        db.transaction(() => {
          // Only rows whose payload text holds one of the ids can hold it in a list.
          const rows = db.prepare(`SELECT id, payload FROM vectors WHERE EXISTS (SELECT 1 FROM json_each(?) j WHERE instr(payload, j.value) > 0)`).all(JSON.stringify(ids)) as Row[];
          const update = db.prepare(`UPDATE vectors SET payload = ? WHERE id = ?`);
          const remove = db.prepare(`DELETE FROM vectors WHERE id = ?`);
          for (const r of rows) {
            if (skipped.has(String(r.id))) continue;
            const payload = parsePayload(r.payload);
            let removed = 0, emptied = false;
            for (const key of keys) {
              const list = payload[key];
              if (!Array.isArray(list)) continue;
              const left = list.filter((x) => !gone.has(String(x)));
              if (left.length === list.length) continue;
              removed += list.length - left.length;
              emptied ||= left.length === 0;
              payload[key] = left;
            }
            if (removed === 0) continue;
            out.removed += removed;
            if (emptied) out.deleted += remove.run(r.id).changes;
            else update.run(JSON.stringify(payload), r.id);
          }
        }).immediate();
      });
      return out;
    },
    async compact() {
      for (const path of new Set(Object.values(byCollection))) {
        if (!hasVectors(path)) continue;
        withDb(path, busyTimeoutMs, (db) => {
          db.pragma('secure_delete = ON');
          db.exec('VACUUM');
          if (journalMode(db) === 'wal') truncateWal(db);
        });
      }
    },
  };
}

function withDb<T>(path: string, busyTimeoutMs: number, fn: (db: Db) => T): T {
  const db = openDatabase(path, { busyTimeoutMs });
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

const offsetOf = (o: string | number | null | undefined): string | null => (o === null || o === undefined ? null : String(o));

function parsePayload(text: string): Record<string, unknown> {
  try {
    const v = JSON.parse(text) as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {}; // a payload the SDK could not read either: the point still counts, with nothing in it
  }
}

function asPoint(r: Row, payload: boolean | string[]): Mem0Point {
  if (payload === false) return { id: String(r.id), payload: {} };
  const all = parsePayload(r.payload);
  if (payload === true) return { id: String(r.id), payload: all };
  return { id: String(r.id), payload: Object.fromEntries(payload.filter((k) => k in all).map((k) => [k, all[k]])) };
}
