import type { Db } from '../store/sqlite.js';
import type { MemoryTexts } from '../layouts/contract.js';
import { DAY_MS, type Instant } from '../time/instants.js';

/**
 * The digest's record of what memories rewritten in place said (the state db's digest_texts): a layout that keeps
 * only a memory's latest text (Mastra's working memory) tells each digest every such memory written in its period,
 * and the next digest shows the record's text as the before of a change. One row per text seen (memory, time the
 * store says it was written); `erase` deletes a person's rows (src/erase/state.ts).
 *
 * The record is exact when every digest collects: a text current at a period's start was written in an earlier
 * period, whose digest recorded it (even when it was not among the rows it listed); a layout also tells it the
 * memories written earlier that it does not hold yet (the first digest after set-up). A text written and rewritten
 * before any digest ran has no record: its before is unknown, and the digest says so.
 */

/**
 * A text with a newer one already recorded before this long ago goes: no later digest asks about a time before
 * it. The margin covers a period that starts earlier than the last one ended (another list's digest, a store an
 * earlier digest had no report of).
 */
export const KEEP_SUPERSEDED_MS = 14 * DAY_MS;
/** A memory whose latest text was last seen this long ago goes whole (its before is then unknown). */
export const KEEP_UNSEEN_MS = 90 * DAY_MS;

/**
 * The record of one store for one digest's collect. `record` false (a preview, which writes nothing): `before`
 * reads the record, `seen` keeps nothing. A failed write is reported through `warn` and costs only a later before.
 */
export function memoryTexts(state: Db, store: string, now: Instant, record: boolean, warn: (msg: string) => void = () => {}): MemoryTexts {
  return {
    seen(memories) {
      if (!record || memories.length === 0) return;
      try {
        const put = state.prepare(`INSERT INTO digest_texts (store, memory_id, written_at, subject, text, seen_at) VALUES (?, ?, ?, ?, ?, ?)
          ON CONFLICT (store, memory_id, written_at) DO UPDATE SET subject = excluded.subject, text = excluded.text, seen_at = max(seen_at, excluded.seen_at)`);
        const superseded = state.prepare(`DELETE FROM digest_texts WHERE store = ? AND memory_id = ? AND written_at <
          (SELECT max(written_at) FROM digest_texts WHERE store = ? AND memory_id = ? AND written_at <= ?)`);
        state.transaction(() => {
          for (const m of memories) {
            put.run(store, m.id, m.writtenAt, m.subject, m.text, now);
            superseded.run(store, m.id, store, m.id, now - KEEP_SUPERSEDED_MS);
          }
          state.prepare(`DELETE FROM digest_texts WHERE store = ? AND memory_id IN
            (SELECT memory_id FROM digest_texts WHERE store = ? GROUP BY memory_id HAVING max(seen_at) < ?)`).run(store, store, now - KEEP_UNSEEN_MS);
        }).immediate();
      } catch (err) {
        warn(`digest: could not record the working texts it saw (${(err as Error).message}); the next digest may show their before as unknown`);
      }
    },
    before(id, at) {
      const r = state.prepare(`SELECT text, written_at FROM digest_texts WHERE store = ? AND memory_id = ? AND written_at < ? ORDER BY written_at DESC LIMIT 1`)
        .get(store, id, at) as { text: string; written_at: number } | undefined;
      return r ? { text: r.text, writtenAt: r.written_at } : null;
    },
  };
}
