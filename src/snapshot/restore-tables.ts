/**
 * Restore of a snapshot that holds a store's tables (its manifest's `tables`, the artifact of a store that is a
 * database: src/engines/contract.ts, EngineTables), into the store's configured place only:
 * 1. the snapshot's files were verified against its manifest (restore.ts), the artifact is checked against its own
 *    record, the snapshot must be of this store, its layout and its engine, and the erase ledger is loaded (a
 *    restore that cannot re-apply it is refused here, as on SQLite): before anything changes;
 * 2. under the engine's maintenance lock (one across the fleet), the undo snapshot of the store as it is (kind
 *    'pre-restore', as on SQLite; without one only --force goes on);
 * 3. the engine restores the tables all or nothing: staged, then, before they go live, the erase ledger is re-applied
 *    to them through the layout's own `erasedIn` and `erase` on that engine, then swapped in. A layout that cannot
 *    re-apply a ledger that holds anything refuses there: nothing is swapped, the undo snapshot this restore took is
 *    removed again, and the store is as it was. A kill -9 anywhere leaves the old tables or the new ones.
 * No journal: the swap is one transaction of the database, so there is never a half-restored store to finish.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/config.js';
import type { StoreConfig } from '../store/config.js';
import { usageError, type WardenError } from '../core/errors.js';
import { engineFor } from '../engines/registry.js';
import type { AnyStoreHandle, EngineTables, StoreEngine } from '../engines/contract.js';
import { jobsOf } from '../layouts/registry.js';
import { describeLedger, erasedSnapshotRecords, loadRestoreLedger, reapplyLedgerTo } from '../erase/restore-ledger.js';
import type { Manifest, TablesPart } from './manifest.js';
import { undoSnapshot, type RestoreOptions, type RestoreResult } from './undo.js';

/**
 * Whether a restore of this snapshot into this store goes through the tables (either holds a database's tables):
 * the store's engine has a table artifact, or the snapshot holds one. A mismatch of the two is refused by
 * restoreTablesSnapshot, naming both.
 */
export async function restoresTables(store: StoreConfig, manifest: Manifest): Promise<boolean> {
  return manifest.tables !== undefined || (await engineFor(store)).tables !== undefined;
}

export async function restoreTablesSnapshot(config: Config, storeName: string, from: string, manifest: Manifest, opts: RestoreOptions): Promise<RestoreResult> {
  const storeConfig = config.stores[storeName]!;
  const engine = await engineFor(storeConfig) as StoreEngine<AnyStoreHandle>;
  const part = manifest.tables;
  const here = engine.describe(storeConfig);
  if (manifest.store !== storeName) throw usageError(`${from} is a snapshot of store "${manifest.store}", not "${storeName}"`);
  if (manifest.layout !== storeConfig.layout) throw usageError(`${from} is a snapshot of a ${String(manifest.layout)} store; store "${storeName}" is ${storeConfig.layout}`);
  if (!part || !engine.tables || part.engine !== engine.name) {
    throw usageError(`${from} holds ${part ? `the tables of a ${part.engine} store` : 'a SQLite file'}; store "${storeName}" is a ${engine.name} store (${here}): refused`);
  }
  if (manifest.qdrant.length > 0 || (manifest.vectorFiles ?? []).length > 0) throw usageError(`${from} holds vector snapshots beside the tables, which a restore of a ${engine.name} store does not restore yet: refused`);
  const tables: EngineTables<AnyStoreHandle> = engine.tables;
  const folder = join(from, part.dir);
  await tables.verify(folder);
  const ledger = loadRestoreLedger(config, storeName, { madeUnder: manifest.eraseKeyId ?? opts.madeUnderKey, without: opts.withoutEraseLedger ?? false });

  const result: RestoreResult = {
    store: storeName, from, dryRun: opts.dryRun ?? false, steps: [], undo: null, rows: part.rows, points: {}, erasedKeptOut: null, eraseLedger: describeLedger(ledger),
  };
  result.steps.push(`verified ${Object.keys(manifest.files).length} file(s) against the manifest's sha256, and the tables against their own record`);
  const erasedAt = manifest.name !== undefined ? erasedSnapshotRecords(config, storeName).get(manifest.name) : undefined;
  if (erasedAt !== undefined) result.steps.push(`${manifest.name} is a snapshot an erase removed (${erasedAt}): restored only with the erase ledger re-applied`);
  const plan = [
    `take a pre-restore snapshot of ${storeName}`,
    ledger.key === null && ledger.missing !== undefined
      ? `NOT re-apply the erase ledger (${ledger.missing})`
      : `re-apply the erase ledger (${describeLedger(ledger)}) to the restored tables before they go live`,
    `replace the tables of ${here} with the ${describeTables(part)} read from ${part.source} at ${part.takenAt}, in one transaction`,
  ];
  if (result.dryRun) {
    result.steps.push(...plan.map((s) => `would ${s}`));
    return result;
  }

  const handle = await engine.open(storeName, storeConfig, {});
  try {
    const lock = await engine.lock(handle, 'restore');
    try {
      result.undo = await undoSnapshot(config, storeName, opts, result);
      try {
        let needles: string[] = [];
        const done = await tables.restore(handle, folder, {
          beforeSwap: async (restored) => {
            const kept = await reapplyLedgerTo(await jobsOf(restored), restored, storeName, ledger, opts);
            result.erasedKeptOut = kept.memories;
            result.steps.push(kept.step);
            needles = kept.needles ?? [];
          },
        });
        result.rows = done.tables.memory ?? part.rows;
        result.steps.push(`replaced the tables of ${here} with the snapshot's (${describeTables({ tables: done.tables })})`);
        // The erased rows were loaded and deleted inside the restore's transaction: their bytes stay in the new tables'
        // pages as dead tuples until the tables are rewritten, as after any erase (the engine's scrub).
        if ((result.erasedKeptOut ?? 0) > 0) {
          const scrub = await engine.scrubErased(handle, { tables: Object.keys(done.tables), needles });
          const read = scrub.bytes ? `; their texts read back from the tables' files: ${scrub.bytes.verdict === 'clean' ? 'none left' : `${scrub.bytes.verdict.toUpperCase()}: run erase again for the same person`}` : '';
          result.steps.push(`rewrote the restored tables so the erased rows leave no bytes in them (vacuumed: ${scrub.vacuumed ? 'yes' : 'NO: run erase again for the same person'}${read})`);
        }
      } catch (err) {
        // Refused before the swap (the layout cannot re-apply the ledger there): the store is unchanged, and the undo
        // snapshot this restore took of it goes again, so the refusal changes nothing.
        if (result.undo && (err as WardenError).kind === 'usage') rmSync(result.undo, { recursive: true, force: true });
        throw err;
      }
    } finally {
      await lock.release();
    }
  } finally {
    await handle.close();
  }
  opts.log.info({ store: storeName, from, undo: result.undo, rows: result.rows, erasedKeptOut: result.erasedKeptOut }, 'restore done');
  return result;
}

const describeTables = (p: Pick<TablesPart, 'tables'>) => Object.entries(p.tables).map(([t, n]) => `${t}: ${n} row(s)`).join(', ');
