import { ledgerSelectors, type ErasedLedger, type EraseSelector, type StoreHandle } from '../contract.js';
import { openMastra, quoteId } from './files.js';
import { hasTable } from './delete.js';
import { MESSAGES, metaField, OBSERVATIONS, RESOURCES, THREADS } from './names.js';

/**
 * The Mastra layout's part of every restore (src/layouts/contract.ts, `erasedIn`): the resource, thread and message
 * ids the erase ledger names, and the people it names: a person is a resource id (erase --user takes the resource,
 * its threads and messages, its observations and embeddings). Embeddings are asked too: one whose message is gone
 * (Mastra's own prune leaves them) still names its resource, thread and message.
 */
export function mastraErasedIn(store: StoreHandle, ledger: ErasedLedger): EraseSelector[] {
  const f = openMastra(store);
  try {
    const from = (db: typeof f.db) => (sql: string) => (db.prepare(sql).all() as { v: unknown }[]).map((r) => r.v).filter((v) => v !== null && v !== undefined).map((v) => (Buffer.isBuffer(v) ? v.toString('utf8') : String(v)));
    const col = from(f.db);
    const meta = (key: string) => f.vectorTables.flatMap((t) => from(f.vec)(`SELECT DISTINCT ${metaField(key)} AS v FROM ${quoteId(t)}`));
    const ids = [
      ...col(`SELECT id AS v FROM ${RESOURCES}`),
      ...col(`SELECT id AS v FROM ${THREADS}`),
      ...col(`SELECT id AS v FROM ${MESSAGES}`),
      ...meta('thread_id'),
      ...meta('message_id'),
    ];
    const users = new Set([
      ...col(`SELECT id AS v FROM ${RESOURCES}`),
      ...col(`SELECT DISTINCT resourceId AS v FROM ${THREADS}`),
      ...col(`SELECT DISTINCT resourceId AS v FROM ${MESSAGES}`),
      ...(hasTable(f, OBSERVATIONS) ? col(`SELECT DISTINCT resourceId AS v FROM ${OBSERVATIONS}`) : []),
      ...meta('resource_id'),
    ]);
    return ledgerSelectors(ids, users, ledger);
  } finally {
    f.close();
  }
}
