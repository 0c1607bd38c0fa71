import { ledgerSelectors, type ErasedLedger, type EraseSelector, type StoreHandle } from '../contract.js';
import { memoryColumns } from './schema.js';

/**
 * The warden layout's part of every restore (src/layouts/contract.ts, `erasedIn`): the memory ids the erase ledger
 * names, and the people it names as erase --user takes them here (the user_id column, else the subject). Points in
 * Qdrant go with their rows when `erase` deletes them, and by text in its sweep.
 */
export function wardenErasedIn(store: StoreHandle, ledger: ErasedLedger): EraseSelector[] {
  const db = store.db;
  const ids = db.prepare(`SELECT id FROM memory`).pluck().iterate() as Iterable<unknown>;
  const idList: string[] = [];
  for (const id of ids) if (id !== null && ledger.id(String(id))) idList.push(String(id));
  const col = memoryColumns(db).has('user_id') ? 'user_id' : 'subject';
  const users = (db.prepare(`SELECT DISTINCT ${col} FROM memory WHERE ${col} IS NOT NULL`).pluck().all() as unknown[]).map(String);
  return ledgerSelectors(idList, users, ledger);
}
