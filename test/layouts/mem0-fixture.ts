import Database from 'better-sqlite3';
import { createHash, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { QdrantTarget } from '../helpers/qdrant-server.js';
import { validateConfig, type Config } from '../../src/config/config.js';

/**
 * A mem0 deployment written the way mem0 writes it (docs/mem0-layout.md): the exact DDL of mem0's SQLiteManager
 * (Python `history` + `messages`, or the TypeScript port's `memory_history`), points whose payload has mem0's
 * keys, entity points with `linked_memory_ids`, and the same history rows as `_create_memory`,
 * `_update_memory` and `_delete_memory`. Nothing here goes through memory-warden's code.
 */
export const PY_HISTORY_DDL = `
CREATE TABLE IF NOT EXISTS history (
    id           TEXT PRIMARY KEY,
    memory_id    TEXT,
    old_memory   TEXT,
    new_memory   TEXT,
    event        TEXT,
    created_at   DATETIME,
    updated_at   DATETIME,
    is_deleted   INTEGER,
    actor_id     TEXT,
    role         TEXT
)`;
export const PY_MESSAGES_DDL = `
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY,
    session_scope TEXT,
    role TEXT,
    content TEXT,
    name TEXT,
    created_at DATETIME
)`;
export const TS_HISTORY_DDL = `
CREATE TABLE IF NOT EXISTS memory_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_id TEXT NOT NULL,
    previous_value TEXT,
    new_value TEXT,
    action TEXT NOT NULL,
    created_at TEXT,
    updated_at TEXT,
    is_deleted INTEGER DEFAULT 0
)`;

export type Flavour = 'python' | 'typescript';

export const md5 = (s: string) => createHash('md5').update(s, 'utf8').digest('hex');
/** Python's datetime.now(timezone.utc).isoformat(). */
export const pyIso = (ms: number) => new Date(ms).toISOString().replace('Z', '000+00:00');

export interface AddOptions {
  user_id?: string;
  agent_id?: string;
  run_id?: string;
  actor_id?: string;
  role?: string;
  metadata?: Record<string, unknown>;
  at: number;
  /** The v3 batch path writes ADD rows without updated_at, actor_id or role. */
  batch?: boolean;
}

export class Mem0Fixture {
  readonly db: Database.Database;
  constructor(
    readonly q: QdrantTarget,
    readonly historyPath: string,
    readonly collection: string,
    readonly entities: string,
    readonly flavour: Flavour = 'python',
  ) {
    // Python's sqlite3 module: default rollback journal, no pragmas.
    this.db = new Database(historyPath);
    if (flavour === 'python') {
      this.db.exec(PY_HISTORY_DDL);
      this.db.exec(PY_MESSAGES_DDL);
    } else {
      this.db.exec(TS_HISTORY_DDL);
    }
  }

  static async create(q: QdrantTarget, dir: string, flavour: Flavour = 'python'): Promise<Mem0Fixture> {
    const collection = q.name('mem0');
    const entities = `${collection}_entities`;
    await q.createCollection(collection);
    await q.createCollection(entities);
    return new Mem0Fixture(q, join(dir, 'history.db'), collection, entities, flavour);
  }

  config(extra: Record<string, unknown> = {}, stateDb = join(this.historyPath, '..', 'state.db')): Config {
    return validateConfig({
      stateDb,
      snapshot: { root: join(this.historyPath, '..', 'backups') },
      stores: {
        m: {
          layout: 'mem0',
          db: this.historyPath,
          qdrant: { url: this.q.url, ...(this.q.apiKey ? { apiKey: this.q.apiKey } : {}), collections: [this.collection, this.entities] },
          mem0: { collection: this.collection, entityCollection: this.entities, pageSize: 3, ...extra },
        },
      },
    });
  }

  private history(memoryId: string, oldText: string | null, newText: string | null, event: string, o: { created_at?: string | null; updated_at?: string | null; actor_id?: string | null; role?: string | null; is_deleted?: number }) {
    if (this.flavour === 'python') {
      this.db.prepare(`INSERT INTO history (id, memory_id, old_memory, new_memory, event, created_at, updated_at, is_deleted, actor_id, role) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
        .run(randomUUID(), memoryId, oldText, newText, event, o.created_at ?? null, o.updated_at ?? null, o.is_deleted ?? 0, o.actor_id ?? null, o.role ?? null);
    } else {
      this.db.prepare(`INSERT INTO memory_history (memory_id, previous_value, new_value, action, created_at, updated_at, is_deleted) VALUES (?, ?, ?, ?, ?, ?, ?)`)
        .run(memoryId, oldText, newText, event, o.created_at ?? null, o.updated_at ?? null, o.is_deleted ?? 0);
    }
  }

  /** mem0's `_create_memory` (or the port's `createMemory`). */
  async add(text: string, o: AddOptions): Promise<string> {
    const id = randomUUID();
    const created = this.flavour === 'python' ? pyIso(o.at) : new Date(o.at).toISOString();
    const payload: Record<string, unknown> =
      this.flavour === 'python'
        ? {
            ...(o.metadata ?? {}),
            ...(o.user_id ? { user_id: o.user_id } : {}), ...(o.agent_id ? { agent_id: o.agent_id } : {}), ...(o.run_id ? { run_id: o.run_id } : {}),
            ...(o.actor_id ? { actor_id: o.actor_id } : {}), ...(o.role ? { role: o.role } : {}),
            data: text, hash: md5(text), created_at: created, updated_at: created, text_lemmatized: text.toLowerCase(),
          }
        : { ...(o.metadata ?? {}), ...(o.user_id ? { userId: o.user_id } : {}), ...(o.agent_id ? { agentId: o.agent_id } : {}), data: text, hash: md5(text), createdAt: created };
    await this.q.upsert(this.collection, [{ id, payload }]);
    if (o.batch) this.history(id, null, text, 'ADD', { created_at: created });
    else this.history(id, null, text, 'ADD', { created_at: created, updated_at: this.flavour === 'python' ? created : null, actor_id: o.actor_id ?? null, role: o.role ?? null });
    return id;
  }

  /** mem0's `_update_memory`. */
  async update(id: string, text: string, at: number): Promise<void> {
    const [p] = (await this.q.points(this.collection)).filter((x) => String(x.id) === id);
    const old = p!.payload;
    const updated = this.flavour === 'python' ? pyIso(at) : new Date(at).toISOString();
    const payload = this.flavour === 'python'
      ? { ...old, data: text, hash: md5(text), text_lemmatized: text.toLowerCase(), updated_at: updated }
      : { ...old, data: text, hash: md5(text), updatedAt: updated };
    await this.q.upsert(this.collection, [{ id, payload }]);
    this.history(id, old.data as string, text, 'UPDATE', { created_at: (old.created_at ?? old.createdAt) as string, updated_at: updated, actor_id: (old.actor_id as string) ?? null, role: (old.role as string) ?? null });
  }

  /** mem0's `_delete_memory` (point, DELETE row, entity links). */
  async delete(id: string, at: number): Promise<void> {
    const [p] = (await this.q.points(this.collection)).filter((x) => String(x.id) === id);
    await fetch(`${this.q.url}/collections/${this.collection}/points/delete?wait=true`, { method: 'POST', headers: this.headers(), body: JSON.stringify({ points: [id] }) });
    this.history(id, p!.payload.data as string, null, 'DELETE', { created_at: (p!.payload.created_at as string) ?? null, updated_at: pyIso(at), actor_id: (p!.payload.actor_id as string) ?? null, role: (p!.payload.role as string) ?? null, is_deleted: 1 });
  }

  /** An entity as `_upsert_entity` writes it. */
  async entity(text: string, linked: string[], scope: Record<string, string>): Promise<string> {
    const id = randomUUID();
    await this.q.upsert(this.entities, [{ id, payload: { data: text, entity_type: 'PERSON', linked_memory_ids: linked, ...scope } }]);
    return id;
  }

  /** `save_messages`: the conversation kept for the extractor. */
  saveMessages(scope: string, messages: { role: string; content: string; name?: string }[], at: number): void {
    for (const m of messages) {
      this.db.prepare(`INSERT INTO messages (id, session_scope, role, content, name, created_at) VALUES (?, ?, ?, ?, ?, ?)`).run(randomUUID(), scope, m.role, m.content, m.name ?? null, pyIso(at));
    }
  }

  /** A point written around mem0 (no history), or overwritten raw. */
  async rawPoint(id: string, payload: Record<string, unknown>): Promise<void> {
    await this.q.upsert(this.collection, [{ id, payload }]);
  }

  async points(): Promise<{ id: string; payload: Record<string, unknown> }[]> {
    return (await this.q.points(this.collection)).map((p) => ({ id: String(p.id), payload: p.payload as Record<string, unknown> }));
  }

  async entityPoints(): Promise<{ id: string; payload: Record<string, unknown> }[]> {
    return (await this.q.points(this.entities)).map((p) => ({ id: String(p.id), payload: p.payload as Record<string, unknown> }));
  }

  historyRows(): Record<string, unknown>[] {
    const table = this.flavour === 'python' ? 'history' : 'memory_history';
    return this.db.prepare(`SELECT * FROM ${table} ORDER BY rowid`).all() as Record<string, unknown>[];
  }

  private headers(): Record<string, string> {
    return { 'content-type': 'application/json', ...(this.q.apiKey ? { 'api-key': this.q.apiKey } : {}) };
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
