import type { Command } from 'commander';
import { addStoreOptions, onAnyEngine, print, printJson, storeContext, type CommandContext, type StoreOptions } from './common.js';
import { usageError } from '../core/errors.js';
import type { AnyStoreHandle, LayoutJobs } from '../layouts/contract.js';

type Repairs = Pick<LayoutJobs<AnyStoreHandle>, 'repairDangling' | 'repairTimestamps' | 'repairOrphans'>;

/**
 * `repair dangling|timestamps|orphans`: what check finds, fixed through the store's layout on its engine (a SQLite
 * file, a PostgreSQL schema); a layout that has no such repair refuses it, exit 2, before anything is written.
 */
export function registerRepairCommands(program: Command): void {
  const repair = program.command('repair').description('fix what check finds');
  onAnyEngine(addStoreOptions(repair.command('dangling')))
    .description('delete rows superseded by a row that no longer exists, with their cascade (never reset to NULL)')
    .option('--json', 'print the result as JSON')
    .action(async (opts: StoreOptions, cmd: Command) => {
      const result = await onStore(await storeContext(opts, cmd), 'repairDangling', true, (r, store) => r(store));
      if (opts.json) return printJson(result);
      print`${result.store}: deleted ${result.deleted} row(s)${result.foreignKey ? ` (foreign key of superseded_by: ${result.foreignKey})` : ''}`;
      for (const id of result.dangling) print`  dangling  ${id}`;
      for (const id of result.cascaded) print`  cascaded  ${id}`;
    });
  onAnyEngine(addStoreOptions(repair.command('timestamps')))
    .description('rewrite parseable non-canonical timestamps to canonical UTC (YYYY-MM-DD HH:MM:SS)')
    .option('--json', 'print the result as JSON')
    .action(async (opts: StoreOptions, cmd: Command) => {
      const result = await onStore(await storeContext(opts, cmd), 'repairTimestamps', true, (r, store) => r(store));
      if (opts.json) return printJson(result);
      print`${result.store}: rewrote ${result.rewritten} timestamp(s); ${result.unparseable} unparseable and ${result.outOfRange} outside the years 0000-9999 left for a person`;
      for (const c of result.changes) print`  ${c.id} ${c.column}: ${c.from} -> ${c.to}`;
      for (const l of result.left ?? []) print`  left  ${l.id} ${l.column}: ${l.value}`;
      for (const note of result.notes ?? []) print`  note: ${note}`;
    });
  onAnyEngine(addStoreOptions(repair.command('orphans')))
    .description('delete Qdrant points whose row no longer exists (deleted memories retrieval still returns)')
    .option('--dry-run', 'count them; delete nothing')
    .option('--json', 'print the result as JSON')
    .action(async (opts: StoreOptions & { dryRun?: boolean }, cmd: Command) => {
      const dryRun = opts.dryRun ?? false;
      const result = await onStore(await storeContext(opts, cmd), 'repairOrphans', !dryRun, (r, store) => r(store, { dryRun }));
      if (opts.json) return printJson(result);
      print`${result.store}: ${result.dryRun ? 'would delete' : 'deleted'} ${result.deleted} orphan point(s)`;
      for (const c of result.collections) print`  ${c.collection}: ${c.deleted}`;
      for (const id of result.ids) print`  ${id}`;
    });
}

/**
 * The store opened by its engine, its layout's repair run on it, closed. A store half restored is not to be repaired
 * (`writes`): its orphans are the other half of the restore (src/snapshot/journal.ts, restoreJournalBase: where any
 * store's journal is).
 */
async function onStore<K extends keyof Repairs, T>(
  ctx: CommandContext, repair: K, writes: boolean, run: (fn: NonNullable<Repairs[K]>, store: AnyStoreHandle) => Promise<T>,
): Promise<T> {
  const [{ openStoreOnEngine }, { jobsOf }] = await Promise.all([import('../layouts/open.js'), import('../layouts/registry.js')]);
  const store = await openStoreOnEngine(ctx.config, ctx.storeName);
  try {
    const jobs = (await jobsOf(store)) as Repairs & { name: string };
    const fn = jobs[repair];
    if (!fn) throw usageError(`repair ${REPAIR_WORDS[repair]}: store ${ctx.storeName} is of the ${jobs.name} layout, which has no such repair (the repairs are of the warden layout's supersede chains, times and Qdrant points)`);
    if (writes) {
      const { assertNoPendingRestore, restoreJournalBase } = await import('../snapshot/journal.js');
      assertNoPendingRestore(restoreJournalBase(ctx.config, ctx.storeName));
    }
    const result = await run(fn.bind(jobs) as NonNullable<Repairs[K]>, store);
    ctx.log.info({ store: ctx.storeName, repair: REPAIR_WORDS[repair] }, `repair ${REPAIR_WORDS[repair]} done`);
    return result;
  } finally {
    await store.close();
  }
}

const REPAIR_WORDS: Record<keyof Repairs, string> = { repairDangling: 'dangling', repairTimestamps: 'timestamps', repairOrphans: 'orphans' };
