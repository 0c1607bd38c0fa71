import type { CheckReport, StoreHandle } from '../contract.js';
import { finding, ID_SAMPLE, isProblem, type Finding } from '../../job/findings.js';
import { toCanonical, type Instant } from '../../time/instants.js';
import { openMastra, quoteId, type LibDb, type MastraFiles } from './files.js';
import { ifJson, mastraOf, metaField, MESSAGES, OBSERVATIONS, THREADS } from './names.js';
import { hasTable, OF_A_GROUP } from './delete.js';
import { doomedBy } from './prune.js';
import { parses } from './content.js';
import { workingMemories } from './working-memory.js';
import type { MastraConfig } from './config.js';

// The Mastra store's check: each file's integrity through libsql, then what Mastra's own calls leave behind
// (messages without their thread, embeddings without their message) and what would break a read or a prompt.

const sampled = (db: LibDb, sql: string, params: unknown = {}) => {
  const rows = db.prepare(sql).all(params) as { id: unknown }[];
  return rows.map((r) => String(r.id));
};

function integrity(db: LibDb, path: string): Finding[] {
  const lines = (db.pragma('integrity_check(5)') as Record<string, unknown>[]).map((r) => String(Object.values(r)[0]));
  if (lines.length === 1 && lines[0] === 'ok') return [];
  // libsql's VACUUM leaves a duplicate row in libsql_vector_meta_shadow: integrity_check then says "row not in PRIMARY KEY order".
  const vacuumed = lines.some((l) => l.includes('libsql_vector_meta_shadow')) ? ' (libsql\'s VACUUM leaves this in libsql_vector_meta_shadow: restore a snapshot taken before it)' : '';
  return [finding('mastra_integrity', 'error', `${path}: integrity_check: ${lines.join('; ').slice(0, 300)}${vacuumed}`)];
}

function orphans(f: MastraFiles): Finding[] {
  const out: Finding[] = [];
  const noThread = sampled(f.db, `SELECT id FROM ${MESSAGES} WHERE thread_id NOT IN (SELECT id FROM ${THREADS})`);
  if (noThread.length > 0) out.push(finding('mastra_message_without_thread', 'error', `${noThread.length} messages whose thread is gone: Mastra lists them under no thread`, noThread));
  const noResource = sampled(f.db, `SELECT id FROM ${THREADS} WHERE resourceId IS NULL OR resourceId = ''`);
  if (noResource.length > 0) out.push(finding('mastra_thread_without_resource', 'error', `${noResource.length} threads without a resource: no user owns them, erase --user cannot reach them`, noResource));
  const known = f.vec === f.db ? null : new Set(sampled(f.db, `SELECT id FROM ${MESSAGES}`));
  for (const t of f.vectorTables) {
    const meta = f.vec.prepare(`SELECT vector_id AS id, ${metaField('message_id')} AS message FROM ${quoteId(t)} WHERE json_valid(metadata)`).all() as { id: string; message: unknown }[];
    const gone = known
      ? meta.filter((m) => typeof m.message === 'string' && !known.has(m.message)).map((m) => m.id)
      : sampled(f.db, `SELECT vector_id AS id FROM ${quoteId(t)} WHERE ${ifJson('metadata', `json_type(metadata, '$.message_id')`)} = 'text' AND ${metaField('message_id')} NOT IN (SELECT id FROM ${MESSAGES})`);
    if (gone.length > 0) out.push(finding('mastra_embedding_without_message', 'error', `${t}: ${gone.length} embeddings whose message is gone, each still holding the message's text and returned by a query of the index (recall itself skips them)`, gone));
  }
  return [...out, ...observationOrphans(f)];
}

/**
 * Observational memory left behind by a delete that did not go through Memory.deleteThread (Mastra's storage prune
 * of threads, a raw delete): records of a thread that is gone, and observation-group embeddings (metadata with a
 * thread_id and no message_id) of a thread that is gone. Both still hold what the observer noted about the person.
 */
function observationOrphans(f: MastraFiles): Finding[] {
  const out: Finding[] = [];
  if (hasTable(f, OBSERVATIONS)) {
    const records = sampled(f.db, `SELECT id FROM ${OBSERVATIONS} WHERE threadId IS NOT NULL AND threadId <> '' AND threadId NOT IN (SELECT id FROM ${THREADS})`);
    if (records.length > 0) out.push(finding('mastra_observation_without_thread', 'error', `${records.length} observation records whose thread is gone: Mastra no longer shows them, they still hold what was observed`, records));
  }
  const threads = new Set(sampled(f.db, `SELECT id FROM ${THREADS}`));
  for (const t of f.vectorTables) {
    const rows = f.vec.prepare(`SELECT vector_id AS id, ${metaField('thread_id')} AS thread FROM ${quoteId(t)} WHERE ${OF_A_GROUP}`).all() as { id: string; thread: string }[];
    const gone = rows.filter((r) => !threads.has(r.thread)).map((r) => r.id);
    if (gone.length > 0) out.push(finding('mastra_embedding_without_thread', 'error', `${t}: ${gone.length} observation embeddings whose thread is gone, each still holding the observed text and returned by Mastra's search`, gone));
  }
  return out;
}

function readability(f: MastraFiles, cfg: MastraConfig): Finding[] {
  const out: Finding[] = [];
  const bad: string[] = [];
  let badCount = 0;
  for (const r of f.db.prepare(`SELECT id, content FROM ${MESSAGES}`).iterate() as IterableIterator<{ id: string; content: unknown }>) {
    if (typeof r.content === 'string' && parses(r.content)) continue;
    badCount++;
    if (bad.length < ID_SAMPLE) bad.push(String(r.id));
  }
  if (badCount > 0) out.push(finding('mastra_unparseable_message', 'error', `${badCount} messages whose content is not JSON: Mastra cannot read them back`, bad, badCount));
  const badThreadMeta = sampled(f.db, `SELECT id FROM ${THREADS} WHERE metadata IS NOT NULL AND typeof(metadata) = 'text' AND NOT json_valid(metadata)`);
  if (badThreadMeta.length > 0) out.push(finding('mastra_unparseable_working_memory', 'error', `${badThreadMeta.length} threads whose metadata (thread working memory) is not JSON`, badThreadMeta));
  const large = workingMemories(f.db).filter((m) => Buffer.byteLength(m.text, 'utf8') > cfg.workingMemoryMaxBytes);
  if (large.length > 0) out.push(finding('mastra_large_working_memory', 'warning', `${large.length} working memories over ${cfg.workingMemoryMaxBytes} bytes: each goes into every prompt of its user`, large.map((m) => m.id)));
  return out;
}

export function mastraCheckReport(store: StoreHandle, now: Instant): CheckReport {
  const cfg = mastraOf(store.config);
  const f = openMastra(store);
  try {
    const problems: Finding[] = [];
    const notes: Finding[] = [];
    const integrityFindings = [...integrity(f.db, f.dbPath), ...(f.vec === f.db ? [] : integrity(f.vec, f.vecPath))];
    const found = [...integrityFindings, ...orphans(f), ...readability(f, cfg)];
    if (f.vectorTables.length === 0) notes.push(finding('mastra_no_vectors', 'info', `${f.vecPath}: no LibSQLVector index table: semantic recall is off, or its vectors are in another file (mastra.vectorDb)`));
    const rows = (f.db.prepare(`SELECT count(*) AS n FROM ${MESSAGES}`).get() as { n: number }).n;
    const doomed = doomedBy(f, cfg, now);
    const pending = doomed.messages.length + doomed.threadMessages;
    if (pending > 0) notes.push(finding('mastra_prune_pending', 'info', `${pending} messages past retention (${doomed.threads.length} idle threads): the next prune deletes them`, undefined, pending));
    for (const x of found) (isProblem(x) ? problems : notes).push(x);
    const journal = String((f.db.pragma('journal_mode') as Record<string, unknown>[])[0]?.journal_mode ?? 'unknown').toLowerCase();
    return {
      ok: problems.length === 0, store: store.name, path: store.path, checkedAt: toCanonical(now),
      rows, live: rows - pending, gap: pending,
      integrity: integrityFindings.length === 0 ? 'ok' : integrityFindings.map((x) => x.message).join('; '),
      journalMode: journal, dangling: problems.filter((p) => p.code.includes('without')).reduce((n, p) => n + (p.count ?? 0), 0),
      reviewDue: 0, problems, notes,
    };
  } finally {
    f.close();
  }
}
