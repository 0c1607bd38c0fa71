import { ledgerSelectors, type ErasedLedger, type EraseSelector, type StoreHandle } from '../contract.js';
import { scrollAll } from '../../vectors/contract.js';
import { mem0Handle, userIdOf } from './memories.js';

/**
 * The mem0 layout's part of every restore (src/layouts/contract.ts, `erasedIn`): the memory ids the erase ledger
 * names, in the history (rows that still hold text) and among the memory collection's points, and the people it names: the user of each point
 * (memory and entity collections) and each `user_id=` of the kept conversation's session scopes.
 */
export async function mem0ErasedIn(store: StoreHandle, ledger: ErasedLedger): Promise<EraseSelector[]> {
  const h = mem0Handle(store);
  const ids = new Set<string>();
  const users = new Set<string>();
  // History rows an erase scrubbed keep their ids and no text: only those that still hold text are the memory's.
  const d = h.dialect;
  const holding = `SELECT DISTINCT memory_id FROM ${d.table} WHERE memory_id IS NOT NULL AND (${d.oldText} IS NOT NULL OR ${d.newText} IS NOT NULL)`;
  for (const id of h.store.db.prepare(holding).pluck().iterate() as Iterable<unknown>) {
    if (ledger.id(String(id))) ids.add(String(id));
  }
  if (h.dialect.hasMessages) {
    for (const scope of h.store.db.prepare(`SELECT DISTINCT session_scope FROM messages WHERE session_scope IS NOT NULL`).pluck().iterate() as Iterable<unknown>) {
      for (const part of String(scope).split('&')) if (part.startsWith('user_id=')) users.add(part.slice(8));
    }
  }
  const collections = new Set(await h.points.collections());
  for (const c of [h.collection, h.entityCollection]) {
    if (!collections.has(c)) continue;
    for await (const page of scrollAll(h.points, c, h.cfg.pageSize, true)) {
      for (const p of page) {
        if (c === h.collection && ledger.id(p.id)) ids.add(p.id);
        const u = userIdOf(p);
        if (u !== null) users.add(u);
      }
    }
  }
  return ledgerSelectors(ids, users, ledger);
}
