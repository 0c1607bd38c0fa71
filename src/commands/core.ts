import { Command } from 'commander';
import { addStoreOptions, loadForCommand, print, printJson, storeContext, type StoreOptions } from './common.js';
import { JOB_SCOPES } from './job-names.js';
import { usageError } from '../core/errors.js';
import type { CheckReport } from '../layouts/contract.js';
import type { PruneResult } from '../layouts/warden/prune.js';
import type { Finding } from '../job/findings.js';
import { interruptSignal } from './waiting.js';

/** init, check, run, repair: everything that works on one SQLite store with no queue and no other service. */
export function registerCoreCommands(program: Command): void {
  program
    .command('init')
    .description('create the memory schema in a new store (--create), or migrate a store in use; idempotent')
    .requiredOption('--db <path>', 'the SQLite store')
    .option('--create', 'make a new store file if none exists')
    .option('--json', 'print the result as JSON')
    .action(async (opts: { db: string; create?: boolean; json?: boolean }) => {
      const [{ assertIntact, openDatabase }, { initSchema }, { withMaintenanceLock }, { isStateDb }] = await Promise.all([
        import('../store/sqlite.js'), import('../layouts/warden/schema.js'), import('../store/lock.js'), import('../state/migrate.js'),
      ]);
      const db = openDatabase(opts.db, { create: opts.create ?? false });
      try {
        // memory-warden's own records are no store: the memory table never goes in beside them.
        if (isStateDb(db)) throw usageError(`${opts.db} is memory-warden's state db (its job runs and receipts), not a store; init makes a store in a file of its own`);
        const result = await withMaintenanceLock(opts.db, 'init', async () => {
          assertIntact(db, opts.db, 'integrity_check'); // a migration over a damaged file would bake the damage in
          return initSchema(db, opts.db);
        });
        if (opts.json) return printJson({ db: opts.db, ...result });
        const changes = [
          result.createdTable && 'created table memory',
          result.addedColumns.length > 0 && `added columns ${result.addedColumns.join(', ')}`,
          result.addedIndexes.length > 0 && `added indexes ${result.addedIndexes.join(', ')}`,
          result.addedView && 'added view live_memory',
          result.replacedView && 'replaced an earlier live_memory view (expiry read as prune reads it)',
          result.addedTrigger && 'added trigger memory_stamp_times',
        ].filter(Boolean);
        print`${opts.db}: ${changes.length > 0 ? changes.join('; ') : 'schema up to date'}; journal mode ${result.journalMode}`;
      } finally {
        db.close();
      }
    });

  addStoreOptions(program.command('check'))
    .description('health and integrity report of one store: exit 0 healthy, 1 problems found, 2 could not run')
    .option('--now <time>', 'evaluate as of this ISO-8601 time')
    .option('--json', 'print one JSON object')
    .action(async (opts: StoreOptions, cmd: Command) => {
      const ctx = await storeContext(opts, cmd);
      const [{ runJob }, { loadJob }] = await Promise.all([import('../job/runner.js'), import('./job-loaders.js')]);
      const report = (await runJob('integrity', { store: ctx.storeName }, { ...ctx, jobs: loadJob, record: false })) as CheckReport;
      if (opts.json) printJson(report);
      else printCheck(report);
      process.exitCode = report.ok ? 0 : 1;
    });

  const run = program.command('run').description('run one job now, inline, without a queue');
  for (const [name, scope] of Object.entries(JOB_SCOPES)) {
    const global = scope === 'global';
    const cmd = addStoreOptions(run.command(name).description(`run the ${name} job${global ? ' (all stores, or --store NAME)' : ''}`))
      .option('--now <time>', 'run as if it were this ISO-8601 time')
      .option('--json', 'print the result as JSON');
    if (name === 'prune') cmd.option('--dry-run', 'report what would be deleted; delete nothing');
    cmd.action(async (opts: StoreOptions & { dryRun?: boolean }, c: Command) => {
      // A global job (the digest) covers every configured store unless one is named.
      const ctx = global && !opts.store && !opts.db ? { ...(await loadForCommand(opts, c)), storeName: undefined } : await storeContext(opts, c);
      const payload =
        name === 'prune' ? { store: ctx.storeName, dryRun: opts.dryRun ?? false }
        : global ? (ctx.storeName ? { stores: [ctx.storeName] } : {})
        : { store: ctx.storeName };
      const [{ runJob }, { loadJob }] = await Promise.all([import('../job/runner.js'), import('./job-loaders.js')]);
      // Ctrl-C or SIGTERM stops a job between batches (it is idempotent: the next run finishes it).
      const result = await runJob(name, payload, { ...ctx, jobs: loadJob, signal: interruptSignal() });
      if (opts.json) return printJson(result);
      if (name === 'prune') printPrune(result as PruneResult);
      else if (name === 'integrity') {
        printCheck(result as CheckReport);
        process.exitCode = (result as CheckReport).ok ? 0 : 1;
      } else printJson(result);
    });
  }

  const repair = program.command('repair').description('fix what check finds');
  addStoreOptions(repair.command('dangling'))
    .description('delete rows superseded by a row that no longer exists, with their cascade (never reset to NULL)')
    .option('--json', 'print the result as JSON')
    .action(async (opts: StoreOptions, cmd: Command) => {
      const ctx = await storeContext(opts, cmd);
      const [{ openStore }, { repairDangling }] = await Promise.all([import('../layouts/open.js'), import('../layouts/warden/repair.js')]);
      const store = openStore(ctx.config, ctx.storeName);
      try {
        const result = await repairDangling(store);
        ctx.log.info({ store: store.name, deleted: result.deleted }, 'repair dangling done');
        if (opts.json) return printJson(result);
        print`${store.name}: deleted ${result.deleted} row(s)`;
        for (const id of result.dangling) print`  dangling  ${id}`;
        for (const id of result.cascaded) print`  cascaded  ${id}`;
      } finally {
        store.close();
      }
    });
  addStoreOptions(repair.command('timestamps'))
    .description('rewrite parseable non-canonical timestamps to canonical UTC (YYYY-MM-DD HH:MM:SS)')
    .option('--json', 'print the result as JSON')
    .action(async (opts: StoreOptions, cmd: Command) => {
      const ctx = await storeContext(opts, cmd);
      const [{ openStore }, { repairTimestamps }] = await Promise.all([import('../layouts/open.js'), import('../layouts/warden/repair.js')]);
      const store = openStore(ctx.config, ctx.storeName);
      try {
        const result = await repairTimestamps(store);
        if (opts.json) return printJson(result);
        print`${store.name}: rewrote ${result.rewritten} timestamp(s); ${result.unparseable} unparseable and ${result.outOfRange} outside the years 0000-9999 left for a person`;
        for (const c of result.changes) print`  ${c.id} ${c.column}: ${c.from} -> ${c.to}`;
      } finally {
        store.close();
      }
    });

  program
    .command('config')
    .description('print the effective configuration (defaults, file, environment) after validation')
    .option('--config <file>', 'config file (YAML)')
    .action(async (opts: { config?: string }, cmd: Command) => {
      const { config } = await loadForCommand(opts, cmd);
      const [{ printableConfig }, { eraseKeyPath }] = await Promise.all([import('../config/secret-fields.js'), import('../erase/key.js')]);
      // Where the erase key is, also when the file does not say (beside the state db), right after stateDb.
      const { stateDb, ...rest } = config;
      printJson(printableConfig({ stateDb, eraseKeyFile: eraseKeyPath(config, false), ...rest }));
    });
}

export function printFindings(findings: Finding[], indent = '  '): void {
  for (const f of findings) {
    print`${indent}[${f.severity}] ${f.code}: ${f.message}`;
    if (f.ids && f.ids.length > 0) print`${indent}    ids: ${f.ids.join(', ')}${f.count && f.count > f.ids.length ? ` … (+${f.count - f.ids.length})` : ''}`;
  }
}

function printCheck(r: CheckReport): void {
  print`${r.store} (${r.path}): ${r.ok ? 'healthy' : `${r.problems.length} problem(s)`}`;
  print`  rows ${r.rows}, live ${r.live} (gap ${r.gap}), journal ${r.journalMode}, integrity ${r.integrity}, dangling ${r.dangling}, review due ${r.reviewDue}`;
  printFindings(r.problems);
  printFindings(r.notes);
}

function printPrune(r: PruneResult): void {
  const verb = r.dryRun ? 'would delete' : 'deleted';
  print`${r.store}: ${verb} ${r.deleted} row(s) as of ${r.now}: ${r.expired} expired, ${r.superseded} superseded, ${r.cascaded} by cascade${r.dryRun ? '' : ` (${r.batches} batch(es), ${r.durationMs} ms)`}`;
}
