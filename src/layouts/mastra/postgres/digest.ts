import type { Before, FlaggedRow, MemoryTexts, NewRows, NewRowsOptions, PostgresStoreHandle } from '../../contract.js';
import { parseInstant, toCanonical, type Instant } from '../../../time/instants.js';
import { clip } from '../../../text/untrusted.js';
import { underReview, type WorkingMemory } from '../working-memory.js';
import { instant, OBSERVATIONS, tableOf, THREADS, schemaOf } from './names.js';
import { workingMemoriesPg } from './working-memory.js';

// The digest of a Mastra store on PostgreSQL, the same three kinds of row as on libsql (src/layouts/mastra/digest.ts):
// working memories written in the period (with their before, from the digest's record), threads created in it,
// observation records updated in it. Flagged first, then newest first; counts exact.

const KEEP_CHARS = 2000;

interface Candidate { row: FlaggedRow; at: Instant }

export async function mastraNewRowsPg(store: PostgresStoreHandle, { period, maxRows, lookTwice, texts }: NewRowsOptions): Promise<NewRows> {
  const s = schemaOf(store);
  const inPeriod = (at: Instant | null): at is Instant => at !== null && at >= period.start && at < period.end;
  const all = await workingMemoriesPg(store.pg, store);
  const written = all.filter((m) => inPeriod(m.at));
  const beforeOf = (m: WorkingMemory): Before => {
    const created = parseInstant(m.createdAt);
    if (created !== null && created >= period.start) return { kind: 'none' };
    const seen = texts?.before(m.id, period.start);
    return seen ? { kind: 'text', text: clip(seen.text, KEEP_CHARS), writtenAt: toCanonical(seen.writtenAt) } : { kind: 'unknown' };
  };
  const memories: Candidate[] = written.map((m) => {
    const r = underReview(m);
    return { row: { id: m.id, subject: r.subject, fact: clip(r.fact, KEEP_CHARS), source: r.source, createdAt: r.confirmed_at, expiresAt: null, reasons: lookTwice(r), before: beforeOf(m) }, at: m.at! };
  });
  const record = (ms: WorkingMemory[], t: MemoryTexts) => t.seen(ms.map((m) => ({ id: m.id, subject: m.resource, text: m.text, writtenAt: m.at! })));
  if (texts) {
    record(written, texts);
    record(all.filter((m) => m.at !== null && m.at < period.start && texts.before(m.id, m.at + 1)?.writtenAt !== m.at), texts);
  }
  const listed = new Set(memories.map((c) => c.row.id));
  const range = [new Date(period.start), new Date(period.end)];
  const threads = (await store.pg.query<{ id: string; resource: string | null; title: string | null; at: Date }>(
    `SELECT id, "resourceId" AS resource, title, ${instant('createdAt')} AS at FROM ${tableOf(s, THREADS)}
      WHERE ${instant('createdAt')} >= $1 AND ${instant('createdAt')} < $2`, range)).rows
    .filter((t) => !listed.has(t.id))
    .map((t): Candidate => {
      const r = { subject: String(t.resource ?? ''), fact: clip(t.title ?? '', KEEP_CHARS), source: 'mastra:thread' };
      return { row: { id: t.id, ...r, createdAt: toCanonical(t.at.getTime()), expiresAt: null, reasons: lookTwice(r) }, at: t.at.getTime() };
    });
  const hasObs = (await store.pg.query(`SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, [s, OBSERVATIONS])).rows.length > 0;
  const observations = !hasObs ? [] : (await store.pg.query<{ id: string; scope: string | null; resource: string; text: string; at: Date }>(
    `SELECT o.id, o.scope, coalesce(o."resourceId", t."resourceId", '') AS resource, o."activeObservations" AS text, ${instant('updatedAt', 'o')} AS at
       FROM ${tableOf(s, OBSERVATIONS)} o LEFT JOIN ${tableOf(s, THREADS)} t ON t.id = o."threadId"
      WHERE o."activeObservations" IS NOT NULL AND o."activeObservations" <> '' AND ${instant('updatedAt', 'o')} >= $1 AND ${instant('updatedAt', 'o')} < $2`, range)).rows
    .map((o): Candidate => {
      const r = { subject: String(o.resource), fact: clip(o.text, KEEP_CHARS), source: `mastra:observation:${String(o.scope ?? '')}` };
      return { row: { id: o.id, ...r, createdAt: toCanonical(o.at.getTime()), expiresAt: null, reasons: lookTwice(r) }, at: o.at.getTime() };
    });
  const rows = [...memories, ...threads, ...observations];
  rows.sort((a, b) => b.at - a.at || a.row.id.localeCompare(b.row.id));
  const flagged = rows.filter((c) => c.row.reasons.length > 0);
  const shown = [...flagged, ...rows.filter((c) => c.row.reasons.length === 0)].slice(0, maxRows).map((c) => c.row);
  return { total: rows.length, flagged: flagged.length, shown, more: rows.length - shown.length };
}
