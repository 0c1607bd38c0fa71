import type { Before, FlaggedRow, LookTwice, MemoryTexts, NewRows, Period, StoreHandle } from '../contract.js';
import { DAY_MS, parseInstant, toCanonical, type Instant } from '../../time/instants.js';
import { clip } from '../../text/untrusted.js';
import { openMastra, type MastraFiles } from './files.js';
import { hasTable } from './delete.js';
import { OBSERVATIONS, THREADS } from './names.js';
import { underReview, workingMemories, type WorkingMemory } from './working-memory.js';

// The digest of a Mastra store: what the agents newly learned in the period. Three kinds of row, all the digest's
// ordinary new rows (so every digest path shows them): working memories written in the period, each with what it
// said before (Mastra keeps only the latest text: the before comes from the digest's own record, `texts`); threads
// created in the period (their title); observational memory records updated in the period (their observations).
// Flagged rows first, then newest first; counts exact.

/** A fact can be a long text (observations grow with every observation): keep what render can show. */
const KEEP_CHARS = 2000;

interface Candidate {
  row: FlaggedRow;
  at: Instant;
}

export function mastraNewRows(store: StoreHandle, period: Period, maxRows: number, lookTwice: LookTwice, texts?: MemoryTexts): NewRows {
  const f = openMastra(store);
  try {
    const memories = workingMemoryRows(f, period, lookTwice, texts);
    // A new thread whose own working memory was written in the period is that row already (same id, before: none).
    const listed = new Set(memories.map((c) => c.row.id));
    const threads = threadRows(f, period, lookTwice).filter((c) => !listed.has(c.row.id));
    const all = [...memories, ...threads, ...observationRows(f, period, lookTwice)];
    all.sort((a, b) => b.at - a.at || a.row.id.localeCompare(b.row.id));
    const flagged = all.filter((c) => c.row.reasons.length > 0);
    const shown = [...flagged, ...all.filter((c) => c.row.reasons.length === 0)].slice(0, maxRows).map((c) => c.row);
    return { total: all.length, flagged: flagged.length, shown, more: all.length - shown.length };
  } finally {
    f.close();
  }
}

const inPeriod = (at: Instant | null, p: Period): at is Instant => at !== null && at >= p.start && at < p.end;

/**
 * Every working memory written in the period is recorded (not only the rows shown): the next digest's before. So is
 * one written before the period that the record does not hold yet (the first digest after install, or a record
 * dropped as unseen): its first change after that has a known before.
 */
function workingMemoryRows(f: MastraFiles, period: Period, lookTwice: LookTwice, texts?: MemoryTexts): Candidate[] {
  const all = workingMemories(f.db);
  const written = all.filter((m) => inPeriod(m.at, period));
  const rows = written.map((m) => {
    const r = underReview(m);
    const row: FlaggedRow = { id: m.id, subject: r.subject, fact: clip(r.fact, KEEP_CHARS), source: r.source, createdAt: r.confirmed_at, expiresAt: null, reasons: lookTwice(r), before: beforeOf(m, period, texts) };
    return { row, at: m.at! };
  });
  const record = (ms: WorkingMemory[]) => texts?.seen(ms.map((m) => ({ id: m.id, subject: m.resource, text: m.text, writtenAt: m.at! })));
  record(written);
  if (texts) record(all.filter((m) => m.at !== null && m.at < period.start && texts.before(m.id, m.at + 1)?.writtenAt !== m.at));
  return rows;
}

/**
 * What the working memory said at the period's start: nothing when its resource (or thread) was created in the
 * period, else the digest's record, else unknown.
 */
function beforeOf(m: WorkingMemory, period: Period, texts?: MemoryTexts): Before {
  const created = parseInstant(m.createdAt);
  if (created !== null && created >= period.start) return { kind: 'none' };
  const seen = texts?.before(m.id, period.start);
  return seen ? { kind: 'text', text: clip(seen.text, KEEP_CHARS), writtenAt: toCanonical(seen.writtenAt) } : { kind: 'unknown' };
}

/**
 * Rows whose time column falls in the period. Mastra writes times as toISOString() text; the text bound only skips
 * rows that cannot qualify (any ISO 8601 text of an instant sorts within two days of its UTC date), the instant
 * decides.
 */
function timed(f: MastraFiles, sql: string, column: string, period: Period): Record<string, unknown>[] {
  const lower = new Date(period.start - 2 * DAY_MS).toISOString().slice(0, 10);
  const upper = new Date(period.end + 2 * DAY_MS).toISOString().slice(0, 10);
  return (f.db.prepare(sql).all(lower, upper) as Record<string, unknown>[]).filter((r) => inPeriod(parseInstant(r[column]), period));
}

function threadRows(f: MastraFiles, period: Period, lookTwice: LookTwice): Candidate[] {
  const rows = timed(f, `SELECT id, resourceId, title, createdAt FROM ${THREADS} WHERE createdAt >= ? AND createdAt < ?`, 'createdAt', period);
  return rows.map((t) => {
    const at = parseInstant(t.createdAt)!;
    const r = { subject: String(t.resourceId ?? ''), fact: clip(t.title ?? '', KEEP_CHARS), source: 'mastra:thread' };
    return { row: { id: String(t.id), ...r, createdAt: toCanonical(at), expiresAt: null, reasons: lookTwice(r) }, at };
  });
}

/** Observational memory records updated in the period (Mastra sets updatedAt on each update of the record). */
function observationRows(f: MastraFiles, period: Period, lookTwice: LookTwice): Candidate[] {
  if (!hasTable(f, OBSERVATIONS)) return [];
  const rows = timed(f, `SELECT o.id, o.scope, coalesce(o.resourceId, t.resourceId, '') AS resource, o.activeObservations AS text, o.updatedAt
    FROM ${OBSERVATIONS} o LEFT JOIN ${THREADS} t ON t.id = o.threadId
    WHERE o.activeObservations IS NOT NULL AND o.activeObservations <> '' AND o.updatedAt >= ? AND o.updatedAt < ?`, 'updatedAt', period);
  return rows.map((o) => {
    const at = parseInstant(o.updatedAt)!;
    const r = { subject: String(o.resource), fact: clip(o.text, KEEP_CHARS), source: `mastra:observation:${String(o.scope ?? '')}` };
    return { row: { id: String(o.id), ...r, createdAt: toCanonical(at), expiresAt: null, reasons: lookTwice(r) }, at };
  });
}
