import type { StoreHandle } from '../contract.js';
import type { LookTwice, NewRows, FlaggedRow } from '../contract.js';
import { parseInstant, type Instant } from '../../time/instants.js';
import { scrollAll, type Mem0Point } from '../../vectors/contract.js';
import { createdAtOf, expirationOf, mem0Handle, sourceOf, subjectOf, textOf, type Mem0Options } from './memories.js';

/** A memory added to a mem0 store, in the digest's row shape plus what mem0 records about its origin. */
export interface Mem0NewMemory {
  id: string;
  /** `user:ID`, `agent:ID` or `run:ID`: who the memory is about, as mem0 scopes it. */
  subject: string;
  fact: string;
  /** `role:… actor:…` from mem0's actor_id/role; empty when mem0 recorded neither (its extractor's batch path). */
  source: string;
  created_at: string;
  expires_at: string | null;
  role: string | null;
  actor_id: string | null;
  /** False when the memory was deleted again since (the digest may still want to say it existed). */
  present: boolean;
}

/**
 * Memories added in [since, until): history ADD rows whose `created_at` falls in the window, plus points created
 * in it that history never heard of (history disabled, or written around mem0). Times are compared as instants;
 * newest first. Reads history in one pass and the collection page by page.
 */
export async function mem0NewMemories(store: StoreHandle, since: Instant, until: Instant, opts: Mem0Options = {}): Promise<Mem0NewMemory[]> {
  const h = mem0Handle(store, opts);
  const inWindow = (v: unknown) => {
    const t = parseInstant(v);
    return t !== null && t >= since && t < until;
  };
  const d = h.dialect;
  const actor = d.hasActor ? 'actor_id, role' : 'NULL AS actor_id, NULL AS role';
  const adds = new Map<string, { text: string | null; created_at: string; actor_id: string | null; role: string | null }>();
  const stmt = store.db.prepare(`SELECT memory_id, ${d.newText} AS text, created_at, ${actor} FROM ${d.table} WHERE ${d.event} = 'ADD' ORDER BY rowid`);
  for (const r of stmt.iterate() as IterableIterator<{ memory_id: string; text: string | null; created_at: string; actor_id: string | null; role: string | null }>) {
    if (inWindow(r.created_at)) adds.set(String(r.memory_id), r);
  }

  const out: Mem0NewMemory[] = [];
  const ids = [...adds.keys()];
  const seen = new Set<string>();
  for (let i = 0; i < ids.length; i += h.cfg.pageSize) {
    const chunk = ids.slice(i, i + h.cfg.pageSize);
    const points = new Map((await h.points.retrieve(h.collection, chunk)).map((p) => [p.id, p]));
    for (const id of chunk) {
      const a = adds.get(id)!;
      const p = points.get(id);
      seen.add(id);
      out.push(row(id, p, a.text, a.created_at, a.actor_id ?? str(p?.payload.actor_id), a.role ?? str(p?.payload.role)));
    }
  }
  for await (const page of scrollAll(h.points, h.collection, h.cfg.pageSize, true)) {
    for (const p of page) {
      if (seen.has(p.id) || !inWindow(createdAtOf(p))) continue;
      out.push(row(p.id, p, textOf(p), createdAtOf(p)!, str(p.payload.actor_id), str(p.payload.role)));
    }
  }
  return out.sort((a, b) => (parseInstant(b.created_at) ?? 0) - (parseInstant(a.created_at) ?? 0));
}

const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

function row(id: string, p: Mem0Point | undefined, text: string | null, createdAt: string, actorId: string | null, role: string | null): Mem0NewMemory {
  const exp = p ? expirationOf(p) : undefined;
  return {
    id,
    subject: p ? subjectOf(p) : '',
    // The point holds the current text; history's ADD row the text as first written (all that is left after a delete).
    fact: (p && textOf(p)) ?? text ?? '',
    source: sourceOf(actorId, role),
    created_at: createdAt,
    expires_at: typeof exp === 'string' ? exp : null,
    role,
    actor_id: actorId,
    present: p !== undefined,
  };
}

/**
 * The digest's "new memories" section for a mem0 store, in the shape `newRows` gives for the warden layout, of the
 * memories added in the period that still exist:
 * the look-twice rules applied to subject, fact and source (`role:tool` reads as tool output; mem0's extractor
 * records no source at all, which is flagged as such). Exact counts; at most maxRows shown, flagged first.
 */
export async function mem0NewRows(store: StoreHandle, period: { start: Instant; end: Instant }, maxRows: number, lookTwice: LookTwice, opts: Mem0Options = {}): Promise<NewRows> {
  // A memory deleted since it was added (mem0's own delete, later the same day) is no longer one the agent remembers:
  // not listed, nor counted, as new (the digest has no place for deletions; prune's are in its maintenance part).
  const all = (await mem0NewMemories(store, period.start, period.end, opts)).filter((m) => m.present);
  const rows: FlaggedRow[] = all.map((m) => ({
    id: m.id, subject: m.subject, fact: m.fact, source: m.source, createdAt: m.created_at, expiresAt: m.expires_at,
    reasons: lookTwice({ subject: m.subject, fact: m.fact, source: m.source }),
  }));
  const flagged = rows.filter((r) => r.reasons.length > 0);
  const shown = [...flagged, ...rows.filter((r) => r.reasons.length === 0)].slice(0, maxRows);
  return { total: rows.length, flagged: flagged.length, shown, more: rows.length - shown.length };
}
