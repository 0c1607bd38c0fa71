import type { CorrectOptions, Corrected, StoreHandle } from '../contract.js';
import { usageError } from '../../core/errors.js';
import { openMastra } from './files.js';
import { underReview, workingMemories, writeWorkingMemory, type WorkingMemory } from './working-memory.js';

/**
 * A person's correction of a working memory (docs/mastra-layout.md, "review and drift"). Mastra keeps one text per
 * resource or thread and no history, so a supersede replaces the text in place (resolution `replaced`, no new id)
 * and a delete clears it the way Mastra reads "none". Mastra has no expiry: that correction is refused. Each runs
 * in one transaction of the store and of the verdict log: the guard, the write and the person's record together.
 */
export function correctMastra(store: StoreHandle, { id, now, correction, log, decided, guard }: CorrectOptions): Corrected {
  if (correction.action === 'expire') {
    throw usageError(`review expire: Mastra working memory has no expiry (nothing in Mastra would ever end it); replace or delete ${JSON.stringify(id)} instead`);
  }
  const f = openMastra(store);
  try {
    return log.together(store.db, () => {
      // The first one, as currentMemory shows it (a resource and a thread sharing an id: the resource's).
      const [m] = workingMemories(f.db, id);
      guard?.(m ? { ...underReview(m), superseded_by: null, expires_at: null } : null);
      if (!m) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name} (no working memory with that resource or thread id)`);
      if (correction.action === 'supersede') {
        assertReplaces(m, correction.fact);
        written(writeWorkingMemory(f.db, m, correction.fact, now), store, id);
        const resolution = 'replaced';
        return { resolution, resolved: decided(id, resolution, { action: 'supersede', scope: m.scope, fact: correction.fact, source: correction.source }) };
      }
      written(writeWorkingMemory(f.db, m, null, now), store, id);
      return { resolution: 'deleted', resolved: decided(id, 'deleted', { action: 'delete', scope: m.scope }), deleted: [id] };
    });
  } finally {
    f.close();
  }
}

/**
 * A working memory that reads as a JSON object was written by an agent with a working-memory schema: Mastra's
 * update tool merges into `JSON.parse` of it, and silently starts from nothing when that fails. Its replacement must
 * be a JSON object too (the schema itself lives in the agent's code: it is not checked here). Markdown takes any text.
 */
export function assertReplaces(m: WorkingMemory, text: string): void {
  if (isJsonObject(m.text) && !isJsonObject(text)) {
    throw usageError(`review supersede: the working memory of ${JSON.stringify(m.id)} is JSON (an agent with a working-memory schema merges into it): the replacement must be a JSON object too; nothing changed`);
  }
}

function isJsonObject(text: string): boolean {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === 'object' && v !== null && !Array.isArray(v);
  } catch {
    return false;
  }
}

/** Inside the transaction the row was just read: a write that changes nothing means it went; nothing is recorded. */
function written(changed: boolean, store: StoreHandle, id: string): void {
  if (!changed) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name} (it went meanwhile)`);
}
