/**
 * Every restore re-applies the erase ledger: a snapshot taken before an erase holds what the erase took, and a
 * restore of it (local or from a target, by name or `latest`, a pre-restore snapshot too, a restore finished after a
 * kill or rolled back) must not bring any of it back. The ledger is what erase keeps in the state db under the erase
 * key (needles.ts: the keyed hashes of every id an erase took and of every person `--user` named; the receipts' keyed
 * selectors). Before the restored files replace the store's, the layout says which of their ids and people the ledger
 * names (Layout.erasedIn, src/layouts/contract.ts) and erases them there with its own `erase`, on connections with
 * secure_delete on, the file compacted after: what replaces the store never held them.
 *
 * Without the ledger (no state db, an erase key that is missing or not the one the snapshot was taken under) a
 * restore cannot know what was erased since the snapshot was taken: it is refused, saying so, unless the operator
 * says `--without-erase-ledger`. The state db and the erase key are part of what an operator backs up
 * (docs/erase.md, "What to back up").
 */
import { existsSync } from 'node:fs';
import type { Config } from '../config/config.js';
import { expandHome } from '../config/read.js';
import type { Logger } from '../log/logger.js';
import type { Db } from '../store/sqlite.js';
import { journalMode, truncateWal } from '../store/sqlite.js';
import { openStateDb } from '../state/state.js';
import { usageError, WardenError } from '../core/errors.js';
import { openStore } from '../layouts/open.js';
import { layoutFor } from '../layouts/registry.js';
import type { ErasedLedger, EraseSelector, LayoutJobs } from '../layouts/contract.js';
import { idMac, userMac } from '../snapshot/targets/holds.js';
import { boundKeyId, eraseKey, eraseKeyId, holdsKeyedHashes } from './key.js';
import { recordErasedIds, selectorMac } from './needles.js';
import { deletedFor } from './ledger.js';
import type { Instant } from '../time/instants.js';

/** The flag that restores without the ledger, named in every refusal. */
export const WITHOUT_LEDGER_FLAG = '--without-erase-ledger';

/** The erase ledger of one store, as a restore re-applies it (or why it cannot). */
export interface RestoreLedger {
  store: string;
  stateDb: string;
  /** Null: the ledger cannot be re-applied, and the operator said to restore without it. */
  key: Buffer | null;
  /** Why it cannot be re-applied (set exactly when `key` is null and the ledger is not merely empty). */
  missing?: string;
  /** Keyed hashes (holds.ts's form) of every id an erase of this store took. */
  ids: ReadonlySet<string>;
  /** Keyed hashes (holds.ts's form) of every person `erase --user` named for this store. */
  users: ReadonlySet<string>;
  /** Keyed selector hashes (needles.ts) of this store's erases: a `--user` erase recorded before users were. */
  selectors: ReadonlySet<string>;
}

/** What re-applying the ledger did to a restored store: the memories it kept out, and the line the restore prints. */
export interface KeptOut {
  /** Erased memories (and whatever the layout's erase takes by id: threads, messages, resources) taken out again. */
  memories: number;
  step: string;
  /** The taken-out memories' texts and ids (four bytes or more): what a database engine's scrub reads its files back for. */
  needles?: string[];
  /** The tables of a database store the layout's erases deleted from (Erased.tables): what the engine's scrub rewrites and reads back. */
  tables?: string[];
}

const empty = (store: string, stateDb: string, key: Buffer | null, missing?: string): RestoreLedger =>
  ({ store, stateDb, key, ...(missing !== undefined ? { missing } : {}), ids: new Set(), users: new Set(), selectors: new Set() });

/**
 * The ledger a restore of this store re-applies, read before anything changes. `madeUnder`: the erase key id the
 * snapshot names (its manifest's `eraseKeyId`, a target's holds' `keyId`): a state db not bound to that key is not the
 * one that knows what was erased since. Refused (a usage error naming the flag) when the ledger is not there, unless
 * `without`; never creates a state db or a key.
 */
export function loadRestoreLedger(config: Pick<Config, 'stateDb' | 'eraseKeyFile'>, store: string, opts: { madeUnder?: string | undefined; without?: boolean }): RestoreLedger {
  const stateDb = expandHome(config.stateDb);
  const lost = (why: string): RestoreLedger => {
    if (opts.without) return empty(store, stateDb, null, why);
    throw usageError(
      `restore: cannot re-apply erasures: ${why}. Restored without the erase ledger, the snapshot brings back every memory erased since it was taken. ` +
        `Put the state db and the erase key back from your backup (docs/erase.md: what to back up), or restore with ${WITHOUT_LEDGER_FLAG} to restore it anyway`,
    );
  };
  if (!existsSync(stateDb)) return lost(`there is no state db at ${stateDb} (the erase ledger lives there)`);
  let db: Db;
  try {
    db = openStateDb(stateDb);
  } catch (err) {
    return lost(`state db ${stateDb} cannot be read (${(err as Error).message})`);
  }
  try {
    const bound = boundKeyId(db);
    if (opts.madeUnder !== undefined && bound !== opts.madeUnder) {
      return lost(bound === null
        ? `the snapshot was taken under erase key ${opts.madeUnder}, and state db ${stateDb} has never been used with an erase key: it is not the state db that records what was erased since`
        : `the snapshot was taken under erase key ${opts.madeUnder}, and state db ${stateDb} is bound to erase key ${bound}: its ledger cannot be matched against what the snapshot holds`);
    }
    if (bound === null && !holdsKeyedHashes(db)) return empty(store, stateDb, null); // nothing was ever erased here
    let key: Buffer;
    try {
      key = eraseKey(config, db);
    } catch (err) {
      if (err instanceof WardenError) return lost(err.message);
      throw err;
    }
    const pluck = (sql: string, ...args: unknown[]) => new Set(db.prepare(sql).pluck().all(...args) as string[]);
    return {
      store, stateDb, key,
      ids: pluck(`SELECT mac FROM erase_needles WHERE store = ? AND kind = 'id'`, store),
      users: pluck(`SELECT mac FROM erase_needles WHERE store = ? AND kind = 'user'`, store),
      selectors: new Set([
        ...pluck(`SELECT DISTINCT selector_mac FROM erase_needles WHERE store = ?`, store),
        ...pluck(`SELECT selector_sha256 FROM erase_receipts WHERE store = ? AND selector = 'user' AND selector_sha256 IS NOT NULL AND key_id = ?`, store, eraseKeyId(key)),
      ]),
    };
  } finally {
    db.close();
  }
}

/** The ledger's size, as the restore says it. */
export function describeLedger(l: RestoreLedger): string {
  if (l.key === null && l.missing !== undefined) return `NOT re-applied (${WITHOUT_LEDGER_FLAG}): ${l.missing}`;
  return `${l.ids.size} erased id(s), ${l.users.size} erased person(s)`;
}

const holdsAnything = (l: RestoreLedger) => l.key !== null && (l.ids.size > 0 || l.users.size > 0 || l.selectors.size > 0);

/** The ledger as the layout asks it (contract.ts, ErasedLedger): the key never leaves this module. */
function asked(l: RestoreLedger, key: Buffer): ErasedLedger {
  return {
    id: (id) => l.ids.has(idMac(key, id)),
    user: (user) => l.users.has(userMac(key, user)) || l.selectors.has(selectorMac(key, { user })),
  };
}

/**
 * Re-apply the ledger to a restored store file before it replaces the store's (`staged`: the file the restore will
 * rename over the store file; the store's other parts, collections and vector files, are the restored ones already):
 * whatever of it an erase took goes again, through the layout's own erase, and the file is compacted (no free page
 * keeps it). Ids found again under a person are filed in the ledger too. Idempotent: a restore killed and finished
 * later re-applies it to its new staged copy.
 */
export async function reapplyLedger(config: Config, storeName: string, staged: string, l: RestoreLedger, opts: { now: () => Instant; log: Logger }): Promise<KeptOut> {
  const none = nothingToApply(l, storeName, opts.log);
  if (none) return none;
  const storeConfig = config.stores[storeName]!;
  const over = { ...config, stores: { ...config.stores, [storeName]: { ...storeConfig, db: staged } } } as Config;
  const layout = layoutFor(storeConfig);
  const store = openStore(over, storeName);
  try {
    const own = layout.scrubsOwnFiles === true;
    return await eraseAgain(layout, store, storeName, l, opts, {
      before: () => {
        if (!own) store.db.pragma('secure_delete = ON');
      },
      after: () => {
        if (own) return;
        store.db.pragma('temp_store = DEFAULT');
        store.db.exec('VACUUM');
        if (journalMode(store.db) === 'wal') truncateWal(store.db);
      },
    });
  } finally {
    store.close();
  }
}

/**
 * Re-apply the ledger to restored tables that are not live yet (`restored`: a handle on them, as the engine's restore
 * hands it over before the swap, src/engines/contract.ts EngineTables.restore), through the layout's own `erasedIn`
 * and `erase` on that engine. A layout that cannot do either there refuses (its error is passed on): the restore
 * then stops with nothing swapped. An empty ledger asks nothing of the layout.
 */
export async function reapplyLedgerTo<H>(jobs: Pick<LayoutJobs<H>, 'erasedIn' | 'erase'>, restored: H, storeName: string, l: RestoreLedger, opts: { now: () => Instant; log: Logger }): Promise<KeptOut> {
  const none = nothingToApply(l, storeName, opts.log);
  if (none) return none;
  return eraseAgain(jobs, restored, storeName, l, opts, {});
}

/** What a restore says when the ledger asks nothing of the layout: nothing erased, or not re-applied at all. */
function nothingToApply(l: RestoreLedger, storeName: string, log: Logger): KeptOut | undefined {
  if (l.key === null) {
    if (l.missing === undefined) return { memories: 0, step: 're-applied the erase ledger: nothing was ever erased with this state db' };
    log.warn({ store: storeName, why: l.missing }, `restore without the erase ledger (${WITHOUT_LEDGER_FLAG}): memories erased since the snapshot was taken may be back`);
    return { memories: 0, step: `did NOT re-apply the erase ledger (${WITHOUT_LEDGER_FLAG}): ${l.missing}; memories erased since the snapshot was taken may be back` };
  }
  if (!holdsAnything(l)) return { memories: 0, step: 're-applied the erase ledger: nothing was ever erased from this store' };
  return undefined;
}

/** What the layout finds of the ledger in a restored store, erased again there; `before`/`after` bracket the erases. */
async function eraseAgain<H>(
  layout: Pick<LayoutJobs<H>, 'erasedIn' | 'erase'>, store: H, storeName: string, l: RestoreLedger, opts: { now: () => Instant; log: Logger },
  around: { before?: () => void; after?: () => void },
): Promise<KeptOut> {
  const key = l.key!;
  const taken = new Set<string>();
  const texts = new Set<string>();
  const tables = new Set<string>();
  const selectors: EraseSelector[] = await layout.erasedIn(store, asked(l, key));
  if (selectors.length === 0) return { memories: 0, step: `re-applied the erase ledger (${describeLedger(l)}): the snapshot holds none of it` };
  around.before?.();
  const state = openStateDb(l.stateDb);
  try {
    for (const selector of selectors) {
      const deletedIds = 'user' in selector ? deletedFor(state, key, storeName, selector.user) : [];
      const erased = await layout.erase(store, { selector, dryRun: false, now: opts.now, log: opts.log, vectorsLost: true, record: false, deletedIds });
      for (const id of erased.ids) taken.add(id);
      for (const t of erased.texts) texts.add(t);
      for (const t of erased.tables ?? []) tables.add(t);
      if ('user' in selector) recordErasedIds(state, key, storeName, selectorMac(key, selector), erased.ids);
    }
  } finally {
    state.close();
  }
  around.after?.();
  opts.log.info({ store: storeName, keptOut: taken.size }, 'restore: the erase ledger kept erased memories out');
  const needles = [...texts, ...taken].filter((n) => Buffer.byteLength(n) >= 4);
  return { memories: taken.size, step: `re-applied the erase ledger (${describeLedger(l)}): kept out ${taken.size} erased memor${taken.size === 1 ? 'y' : 'ies'}`, needles, ...(tables.size > 0 ? { tables: [...tables] } : {}) };
}

/**
 * The snapshots an erase removed from this store, by name, with when (erased_snapshots), read without making a
 * state db where there is none: `snapshots list` marks them, `restore latest` never picks them.
 */
export function erasedSnapshotRecords(config: Pick<Config, 'stateDb'>, store: string): Map<string, string> {
  const stateDb = expandHome(config.stateDb);
  if (!existsSync(stateDb)) return new Map();
  const db = openStateDb(stateDb);
  try {
    const rows = db.prepare(`SELECT snapshot, erased_at FROM erased_snapshots WHERE store = ?`).all(store) as { snapshot: string; erased_at: string }[];
    return new Map(rows.map((r) => [r.snapshot, r.erased_at]));
  } finally {
    db.close();
  }
}
