import { existsSync } from 'node:fs';
import { Command } from 'commander';
import { addStoreOptions, loadForCommand, onAnyEngine, print, printJson, storeContext, type StoreOptions } from './common.js';
import { JOB_SCOPES, OWN_COMMAND_JOBS } from './job-names.js';
import { storeError, usageError } from '../core/errors.js';
import type { CheckReport } from '../layouts/contract.js';
import { printCheck, printJobResult } from './run-output.js';
import { interruptSignal } from './waiting.js';
import { registerRepairCommands } from './repair.js';

/** init, check, run, repair: everything that works on one store with no queue and no other service. */
export function registerCoreCommands(program: Command): void {
  onAnyEngine(program
    .command('init'))
    .description('create the memory schema in a new store (--create), or migrate a store in use; idempotent')
    .option('--db <path>', 'the SQLite store')
    .option('--store <name>', 'a configured store: a PostgreSQL store\'s schema, tables and view are created in its database')
    .option('--config <file>', 'config file (YAML), with --store')
    .option('--create', 'make a new store file if none exists')
    .option('--json', 'print the result as JSON')
    .action(async (opts: { db?: string; store?: string; config?: string; create?: boolean; json?: boolean }, cmd: Command) => {
      if ((opts.db === undefined) === (opts.store === undefined)) throw usageError('init: give --db PATH (a SQLite store) or --store NAME (a configured store), one of them');
      if (opts.db !== undefined && opts.config !== undefined) throw usageError('init: --db PATH is a SQLite file and reads no config; with --config, name the store: --store NAME');
      if (opts.store !== undefined) return initConfiguredStore(opts as StoreOptions & { store: string; json?: boolean }, cmd);
      await initSqliteFile(opts.db!, opts);
    });

  onAnyEngine(addStoreOptions(program.command('check')))
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
    // `run erase` and `run restore` are the erase and restore commands, with what they take (a person, a folder).
    if (OWN_COMMAND_JOBS.has(name)) continue;
    const global = scope === 'global';
    // The job says which engines it runs on, and src/job/runner.ts refuses a store of any other.
    const cmd = onAnyEngine(addStoreOptions(run.command(name))).description(`run the ${name} job${global ? ' (all stores, or --store NAME)' : ''}`)
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
      if (name === 'integrity') process.exitCode = (result as CheckReport).ok ? 0 : 1;
      if (opts.json) return printJson(result);
      await printJobResult(name, result);
    });
  }

  registerRepairCommands(program);

  onAnyEngine(program
    .command('config'))
    .description('print the effective configuration (defaults, file, environment) after validation')
    .option('--config <file>', 'config file (YAML)')
    .action(async (opts: { config?: string }, cmd: Command) => {
      const { config } = await loadForCommand(opts, cmd);
      const [{ printableConfig }, { eraseKeyPath }, { engineFor }, { mem0Shown }] = await Promise.all([import('../config/secret-fields.js'), import('../erase/key.js'), import('../engines/registry.js'), import('../layouts/mem0/config.js')]);
      // Where the erase key is, also when the file does not say (beside the state db), right after stateDb.
      const { stateDb, ...rest } = config;
      // Each store says where it is as its engine names it (its file; `postgres schema NAME`); a store with no file
      // (a database) shows no empty `db`.
      const shown = Object.fromEntries(await Promise.all(Object.entries(rest.stores).map(async ([name, { db, ...store }]) =>
        [name, { ...(db === '' ? {} : { db }), where: (await engineFor(store)).describe({ db, ...store }), ...store, ...(store.mem0 ? { mem0: mem0Shown(store.mem0) } : {}) }] as const)));
      printJson(printableConfig({ stateDb, eraseKeyFile: eraseKeyPath(config, false), ...rest, stores: shown })); // stores stays where it was among the keys
    });
}


/**
 * `init --store NAME`: a configured store, through its engine. A SQLite store is `init --db` of its file; a PostgreSQL
 * store gets its schema, table, indexes and view in its database (src/layouts/<layout>/postgres/).
 */
async function initConfiguredStore(opts: StoreOptions & { store: string; json?: boolean; create?: boolean }, cmd: Command): Promise<void> {
  const ctx = await storeContext(opts, cmd);
  const store = ctx.config.stores[ctx.storeName]!;
  if (store.engine !== 'postgres') {
    const layout = (await import('../layouts/registry.js')).layoutFor(store);
    if (layout.schemaOwner.by === 'sdk') return initSdkFile(ctx.storeName, store.db, layout.name, layout.schemaOwner.sdk, opts);
    await initSqliteFile(store.db, opts);
    return;
  }
  const [{ engineFor }, { postgresLayoutFor }] = await Promise.all([import('../engines/registry.js'), import('../layouts/registry.js')]);
  const [engine, layout] = await Promise.all([engineFor(store), postgresLayoutFor(store)]);
  const handle = await engine.open(ctx.storeName, store, {});
  try {
    const result = await layout.init(handle);
    ctx.log.info({ store: ctx.storeName, created: result.created }, 'init done');
    if (opts.json) return printJson({ store: ctx.storeName, where: handle.path, ...result });
    print`${ctx.storeName} (${handle.path}): ${result.created.length > 0 ? `created ${result.created.join(', ')}` : 'schema up to date'}`;
    for (const note of result.notes) print`  note: ${note}`;
  } finally {
    await handle.close();
  }
}

/**
 * `init --store NAME` of a SQLite store whose tables its SDK makes (Layout.schemaOwner): nothing is added to the SDK's
 * file; `--create` is refused, since memory-warden does not make that layout's tables.
 */
async function initSdkFile(name: string, path: string, layout: string, sdk: string, opts: { create?: boolean; json?: boolean }): Promise<void> {
  if (opts.create) throw usageError(`init --create: store ${name} is of the ${layout} layout, whose tables ${sdk} makes; memory-warden creates none`);
  (await import('../store/store-path.js')).assertStorePath(path, `stores.${name}.db`);
  if (!existsSync(path)) throw storeError(`${path}: no such store (${sdk} makes it with its first write)`);
  const note = `layout ${layout}: its tables are made by ${sdk}; memory-warden adds nothing to its files`;
  if (opts.json) return printJson({ store: name, where: path, created: [], notes: [note] });
  print`${name} (${path}): nothing to create`;
  print`  note: ${note}`;
}

/**
 * The SDK layout whose tables a SQLite file holds (Layout.schemaOwner `sdk`, its assertSchema passing), when it has no
 * warden `memory` table: `init --db` (which reads no config) must not put the warden schema into an SDK's file.
 */
async function sdkLayoutOfFile(db: import('../store/sqlite.js').Db, path: string): Promise<{ layout: string; sdk: string } | undefined> {
  if (db.prepare(`SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'memory'`).get() !== undefined) return undefined;
  const { LAYOUTS } = await import('../layouts/registry.js');
  for (const layout of Object.values(LAYOUTS)) {
    if (layout.schemaOwner.by !== 'sdk') continue;
    try {
      layout.assertSchema(db, { db: path, layout: layout.name } as never);
      return { layout: layout.name, sdk: layout.schemaOwner.sdk };
    } catch {
      // not this layout's file
    }
  }
  return undefined;
}

/** `init --db PATH`: create or migrate the warden schema in a SQLite file, under its maintenance lock. */
async function initSqliteFile(path: string, opts: { create?: boolean; json?: boolean }): Promise<void> {
  (await import('../store/store-path.js')).assertStorePath(path, '--db', 'option');
  const [{ assertIntact, openDatabase }, { initSchema }, { withMaintenanceLock }, { isStateDb }] = await Promise.all([
    import('../store/sqlite.js'), import('../layouts/warden/schema.js'), import('../store/lock.js'), import('../state/migrate.js'),
  ]);
  const db = openDatabase(path, { create: opts.create ?? false });
  try {
    // memory-warden's own records are no store: the memory table never goes in beside them.
    if (isStateDb(db)) throw usageError(`${path} is memory-warden's state db (its job runs and receipts), not a store; init makes a store in a file of its own`);
    const sdk = await sdkLayoutOfFile(db, path);
    if (sdk) throw usageError(`init --db: ${path} holds the tables of ${sdk.sdk} (layout ${sdk.layout}); memory-warden adds nothing to an SDK's file: name it in a config with layout: ${sdk.layout}`);
    const result = await withMaintenanceLock(path, 'init', async () => {
      assertIntact(db, path, 'integrity_check'); // a migration over a damaged file would bake the damage in
      return initSchema(db, path);
    });
    if (opts.json) return printJson({ db: path, ...result });
    const changes = [
      result.createdTable && 'created table memory',
      result.addedColumns.length > 0 && `added columns ${result.addedColumns.join(', ')}`,
      result.addedIndexes.length > 0 && `added indexes ${result.addedIndexes.join(', ')}`,
      result.addedView && 'added view live_memory',
      result.replacedView && 'replaced an earlier live_memory view (expiry read as prune reads it)',
      result.addedTrigger && 'added trigger memory_stamp_times',
    ].filter(Boolean);
    print`${path}: ${changes.length > 0 ? changes.join('; ') : 'schema up to date'}; journal mode ${result.journalMode}`;
  } finally {
    db.close();
  }
}
