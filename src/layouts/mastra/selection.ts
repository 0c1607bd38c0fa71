import type { EraseSelector } from '../contract.js';
import { quoteId, type LibDb, type MastraFiles } from './files.js';
import { hasTable } from './delete.js';
import { ifJson, MESSAGES, metaField, metaQuotes, OBSERVATIONS, RESOURCES, THREADS } from './names.js';
import { messageTexts } from './content.js';

// What an erase of a Mastra store takes (erase.ts deletes it, needles.ts reads the files back for it): the rows a
// selector (--user, --subject, --ids) names, and the texts they hold.

export interface Plan {
  threads: string[];
  messages: string[];
  resources: string[];
  /** Rows whose working memory holds the subject (erase --subject): cleared, the row kept. */
  clearResources: string[];
  clearThreads: string[];
  /** Observation records that go (their ids are the person's too). */
  observations: string[];
  texts: string[];
  /** The embeddings' vectors (F32 bytes) of what goes: a DiskANN node can keep a copy of each (erase.ts). */
  vectors: Buffer[];
}

export const json = (xs: readonly string[]) => JSON.stringify(xs);
export const folded = (col: string) => `instr(lower(${col}), lower(@subject)) > 0`;

/** What the selector takes, with the texts those rows hold (the byte check's and the copies' search). */
export function plan(f: MastraFiles, sel: EraseSelector, deletedIds: readonly string[]): Plan {
  const p = selected(f, sel, deletedIds);
  p.texts = textsOf(f, p, sel);
  p.vectors = f.vectorTables.flatMap((t) => (f.vec.prepare(`SELECT embedding AS v FROM ${quoteId(t)} WHERE ${embeddingWhere(sel)}`).all(embeddingParams(sel, p)) as { v: unknown }[]).map((r) => r.v).filter((v): v is Buffer => Buffer.isBuffer(v) && v.some((b) => b !== 0)));
  return p;
}

/** The rows the selector takes, by id: read again after the deletes, it names what an agent wrote meanwhile. */
export function selected(f: MastraFiles, sel: EraseSelector, deletedIds: readonly string[]): Plan {
  const db = f.db;
  const p: Plan = { threads: [], messages: [], resources: [], clearResources: [], clearThreads: [], observations: [], texts: [], vectors: [] };
  const ids = (sql: string, params: unknown) => (db.prepare(sql).all(params) as { id: string }[]).map((r) => String(r.id));
  if ('user' in sel) {
    const u = { user: sel.user };
    p.threads = ids(`SELECT id FROM ${THREADS} WHERE resourceId = @user`, u);
    p.messages = ids(`SELECT id FROM ${MESSAGES} WHERE resourceId = @user OR thread_id IN (SELECT id FROM ${THREADS} WHERE resourceId = @user)`, u);
    p.resources = ids(`SELECT id FROM ${RESOURCES} WHERE id = @user`, u);
  } else if ('ids' in sel) {
    const all = { ids: json(sel.ids) };
    p.threads = ids(`SELECT id FROM ${THREADS} WHERE id IN (SELECT value FROM json_each(@ids))`, all);
    p.messages = ids(`SELECT id FROM ${MESSAGES} WHERE id IN (SELECT value FROM json_each(@ids)) OR thread_id IN (SELECT value FROM json_each(@ids))`, all);
    p.resources = ids(`SELECT id FROM ${RESOURCES} WHERE id IN (SELECT value FROM json_each(@ids))`, all);
  } else {
    const s = { subject: sel.subject };
    p.messages = ids(`SELECT id FROM ${MESSAGES} WHERE ${folded('content')}`, s);
    p.clearResources = ids(`SELECT id FROM ${RESOURCES} WHERE ${folded('workingMemory')}`, s);
    p.clearThreads = ids(`SELECT id FROM ${THREADS} WHERE ${folded('title')} OR ${folded(ifJson('metadata', 'json(metadata)', '6'))}`, s);
  }
  // What memory-warden's prune already took for this person: any embedding still naming it goes too.
  if ('user' in sel) p.messages.push(...deletedIds.filter((id) => !p.messages.includes(id)));
  if (hasTable(f, OBSERVATIONS)) p.observations = ids(`SELECT id FROM ${OBSERVATIONS} WHERE ${observationWhere(sel)}`, observationParams(sel, p));
  return p;
}

function textsOf(f: MastraFiles, p: Plan, sel: EraseSelector): string[] {
  const out: string[] = [];
  const from = (db: LibDb) => (sql: string, params: unknown) => (db.prepare(sql).all(params) as { t: unknown }[]).map((r) => r.t).filter((t): t is string => typeof t === 'string' && t !== '');
  const col = from(f.db);
  for (const c of col(`SELECT content AS t FROM ${MESSAGES} WHERE id IN (SELECT value FROM json_each(?))`, json(p.messages))) out.push(...messageTexts(c));
  const threads = json([...p.threads, ...p.clearThreads]);
  out.push(...col(`SELECT title AS t FROM ${THREADS} WHERE id IN (SELECT value FROM json_each(?))`, threads));
  out.push(...col(`SELECT ${ifJson('metadata', `json_extract(metadata, '$.workingMemory')`, '6')} AS t FROM ${THREADS} WHERE id IN (SELECT value FROM json_each(?))`, threads));
  out.push(...col(`SELECT workingMemory AS t FROM ${RESOURCES} WHERE id IN (SELECT value FROM json_each(?))`, json([...p.resources, ...p.clearResources])));
  if (hasTable(f, OBSERVATIONS)) out.push(...col(`SELECT activeObservations AS t FROM ${OBSERVATIONS} WHERE ${observationWhere(sel)}`, observationParams(sel, p)));
  // Embeddings whose message is gone still repeat its text in their metadata (Mastra's own prune leaves them);
  // observation groups' embeddings hold theirs as `text`. They are read where they are: the vector file, if another.
  for (const t of f.vectorTables) {
    for (const m of from(f.vec)(`SELECT metadata AS t FROM ${quoteId(t)} WHERE ${embeddingWhere(sel)}`, embeddingParams(sel, p))) {
      try {
        const meta = JSON.parse(m) as { content?: unknown; text?: unknown };
        for (const c of [meta.content, meta.text]) if (typeof c === 'string') out.push(c);
      } catch {
        out.push(m); // metadata another writer broke: the whole of it is what the byte check looks for
      }
    }
  }
  return [...new Set(out.filter((t) => t.trim().length >= 3))];
}

export const observationWhere = (sel: EraseSelector) => ('subject' in sel ? folded('activeObservations') : `resourceId IN (SELECT value FROM json_each(@resources)) OR threadId IN (SELECT value FROM json_each(@threads))`);
export const observationParams = (sel: EraseSelector, p: Plan) => ('subject' in sel ? { subject: sel.subject } : { resources: json('user' in sel ? [sel.user] : p.resources), threads: json(p.threads) });
export const embeddingWhere = (sel: EraseSelector) => ('subject' in sel
  ? folded('metadata')
  : `(${metaField('resource_id')} IN (SELECT value FROM json_each(@resources)) OR ${metaField('thread_id')} IN (SELECT value FROM json_each(@threads)) OR ${metaField('message_id')} IN (SELECT value FROM json_each(@messages))
      OR ${metaQuotes('@resources')} OR ${metaQuotes('@threads')} OR ${metaQuotes('@messages')})`);
export const embeddingParams = (sel: EraseSelector, p: Plan) => ('subject' in sel ? { subject: sel.subject } : { resources: json('user' in sel ? [sel.user] : []), threads: json(p.threads), messages: json(p.messages) });

