import type { Command } from 'commander';
import { addStoreOptions, loadForCommand, onAnyEngine, print, printJson, routedToStoreHost, storeContext, type StoreOptions } from './common.js';
import type { EraseReceipt, EraseSelector } from '../erase/erase.js';
import { usageError } from '../core/errors.js';
import { interruptSignal, timeoutSeconds } from './waiting.js';

interface EraseCliOptions extends StoreOptions {
  user?: string;
  subject?: string;
  ids?: string[];
  dryRun?: boolean;
  snapshots?: boolean;
  vectorsLost?: boolean;
  timeout: string;
}

function selectorFrom(opts: EraseCliOptions): EraseSelector {
  const given = [opts.user !== undefined, opts.subject !== undefined, opts.ids !== undefined].filter(Boolean).length;
  if (given !== 1) throw usageError('erase: give exactly one of --user ID, --subject TEXT, --ids ID...');
  if (opts.user !== undefined) return { user: opts.user };
  if (opts.subject !== undefined) return { subject: opts.subject };
  return { ids: opts.ids! };
}

/** erase (right to erasure), erase receipts and erase key; `run erase` is erase itself. */
export function registerEraseCommands(program: Command): void {
  const cmd = eraseCommand(program.command('erase'));
  const run = program.commands.find((c) => c.name() === 'run');
  if (!run) throw new Error('registerEraseCommands: register the core commands first (no "run" command)');
  eraseCommand(run.command('erase'));

  onAnyEngine(cmd
    .command('receipts'))
    .description('list the stored erase receipts (no content: counts, keyed hashes, times); with --user, --subject or --ids, only the receipts of that selector')
    .option('--config <file>', 'config file (YAML)')
    .option('--store <name>', 'only this store')
    .option('--json', 'print as JSON')
    .action(async (own: StoreOptions, c: Command) => {
      // Options the parent command also defines are parsed by the parent: read both.
      const opts: EraseCliOptions = { ...(c.parent?.opts() as EraseCliOptions), ...own };
      const ctx = await loadForCommand(opts, c);
      const [{ listReceipts }, { expandHome }, { eraseKey }, { selectorMac }] = await Promise.all([
        import('../erase/receipts.js'), import('../config/config.js'), import('../erase/key.js'), import('../erase/needles.js'),
      ]);
      // A selector is found by its keyed digest: only with the erase key, as anyone without it cannot.
      const asked = opts.user !== undefined || opts.subject !== undefined || opts.ids !== undefined;
      const digest = asked ? selectorMac(eraseKey(ctx.config), selectorFrom(opts)) : undefined;
      const rows = listReceipts(expandHome(ctx.config.stateDb), opts.store, digest);
      if (opts.json) return printJson(rows);
      for (const r of rows) print`#${r.id} ${r.erased_at} ${r.store} (${r.layout}) by ${r.selector} ${digestShown(r.selector_sha256, 12)}: ${r.memories} memory(ies) ${r.counts} places ${r.places}`;
    });

  cmd
    .command('key')
    .description('where the erase key is and its id (the state db records which key its hashes were made under); --new starts a new key, knowingly')
    .option('--config <file>', 'config file (YAML)')
    .option('--new', 'make a new key where none is and record it as the state db\'s: every hash made under the earlier key can no longer be matched')
    .option('--json', 'print as JSON')
    .action(async (own: { config?: string; new?: boolean; json?: boolean }, c: Command) => {
      const opts = { ...(c.parent?.opts() as StoreOptions), ...own };
      const ctx = await loadForCommand(opts, c);
      const { eraseKey, eraseKeyId, eraseKeyPath, newEraseKey } = await import('../erase/key.js');
      const shown = opts.new
        ? newEraseKey(ctx.config, ctx.now())
        : { path: eraseKeyPath(ctx.config), keyId: eraseKeyId(eraseKey(ctx.config)), replaced: null };
      if (opts.json) return printJson(shown);
      print`erase key ${shown.path} (key id ${shown.keyId}), for state db ${ctx.config.stateDb}: back it up apart from the state db`;
      if (opts.new) print`  a new key${shown.replaced ? `, in place of key ${shown.replaced}: hashes made under that one (earlier erases, the prune ledger, snapshots' holds) can no longer be matched` : ''}`;
    });
}

/** The erase command, as `erase` and as `run erase`: a store on another host is erased there (routedToStoreHost). */
function eraseCommand(cmd: Command): Command {
  return onAnyEngine(routedToStoreHost(addStoreOptions(cmd)))
    .description('erase every memory of a person or subject from a store (rows, points, mem0 history), then VACUUM: exit 0 erased, 1 copies remain (snapshots, jobs still queued or Redis unreachable after queue use, WAL, bytes read back from the store), 2 could not run')
    .option('--user <id>', 'the person: mem0 user_id; warden: the user_id column, else subject equal to the id')
    .option('--subject <text>', 'every memory whose text or subject contains this (ASCII case-insensitive, at least 3 characters)')
    .option('--ids <id...>', 'these memory ids (row ids, or mem0 memory ids)')
    .option('--dry-run', 'say what would be erased; change nothing')
    .option('--snapshots', 'also delete the snapshot folders that still contain the erased text')
    .option('--vectors-lost', 'mem0: the vector collection is known to be lost (tmpfs reboot): erase from history anyway')
    .option('--now <time>', 'the receipt time (ISO-8601)')
    .option('--timeout <seconds>', "a store on another host: how long to wait for that host's worker; then, as on Ctrl-C, a request it has not taken is withdrawn", '3600')
    .option('--json', 'print the receipt as JSON')
    .action(async (opts: EraseCliOptions, c: Command) => {
      const sel = selectorFrom(opts);
      const waitSeconds = timeoutSeconds(opts.timeout);
      // A spare store thread for erase's quick_check (src/erase/worker.ts), starting while the config and the erase
      // modules load, so that the check that must pass before anything is deleted starts as soon as the store is open.
      if (!opts.dryRun) void import('../store/thread.js').then((m) => m.warmStoreThread(), () => {});
      const ctx = await storeContext(opts, c);
      const flags = { dryRun: opts.dryRun ?? false, snapshots: opts.snapshots ?? false, vectorsLost: opts.vectorsLost ?? false };
      // A store on another machine is erased there, by its host's worker; the receipt comes back (no content).
      const host = ctx.storeHost;
      const receipt = host
        ? ((await (await import('../queue/remote.js')).runOnHost({
            config: ctx.config, log: ctx.log, job: 'erase', data: { store: ctx.storeName, ...sel, ...flags }, timeoutSeconds: waitSeconds, sensitive: true,
            // Ctrl-C or the timeout withdraws a request no worker has taken (the person's id leaves Redis); one
            // already running finishes there and keeps its receipt on that host.
            signal: interruptSignal(), outcomeKeptAt: `memory-warden erase receipts --store ${ctx.storeName}, on host ${host}`,
          })) as EraseReceipt)
        : await (await import('../erase/erase.js')).erase(ctx.config, ctx.storeName, sel, { ...flags, now: ctx.now, log: ctx.log, progress: ctx.progress });
      if (opts.json) printJson(receipt);
      else printReceipt(receipt);
      // A database's WAL is the server's, never erase's to truncate: such a receipt lists it among what it cannot see.
      const walLeft = !receipt.walTruncated && !receipt.bytes;
      const remains = !receipt.dryRun && (receipt.snapshots.found.length > receipt.snapshots.deleted.length || walLeft || !receipt.stateWalTruncated || bytesRemain(receipt));
      process.exitCode = remains ? 1 : 0;
    });
}

/**
 * A layout that reads its own files back (Mastra) counts what of the person it still found there, or could not scrub;
 * an engine that reads its files back (PostgreSQL) what it found, and whether something went unread.
 */
const bytesRemain = (r: EraseReceipt) => (r.counts.bytesLeft ?? 0) > 0 || (r.counts.pagesUnplaced ?? 0) > 0 || (r.counts.bytesUnverified ?? 0) > 0;
/** The start of a keyed digest, as a person reads it; a receipt from before keyed receipts has none. */
const digestShown = (digest: string | null, n: number) => (digest === null ? '(unkeyed digest dropped)' : `HMAC ${digest.slice(0, n)}…`);

export function printReceipt(r: EraseReceipt): void {
  const verb = r.dryRun ? 'would erase' : 'erased';
  print`${r.store} (${r.layout}): ${verb} ${r.memories} memory(ies) selected by ${r.selector} (${digestShown(r.selectorSha256, 16)}) at ${r.erasedAt}${r.id !== null ? `, receipt #${r.id}` : ''}`;
  print`  ${Object.entries(r.counts).map(([k, v]) => `${k} ${v}`).join(', ')}`;
  print`  places: ${r.places.filter((p) => !p.place.startsWith('store:')).map((p) => `${p.place} ${p.count}`).join(', ')}`;
  if (!r.dryRun && !r.bytes) print`  vacuumed ${r.vacuumed ? 'yes' : 'no'}, WAL truncated ${r.walTruncated ? 'yes' : 'NO: a reader held it; run erase again when the agent is idle'}`;
  if (!r.dryRun && r.bytes) printBytes(r, r.bytes);
  if (!r.dryRun && !r.stateWalTruncated) print`  state db WAL truncated NO: the worker held it; run erase again when it is idle`;
  if (!r.dryRun && bytesRemain(r) && !r.bytes) print`  store files NOT clean: ${r.counts.bytesLeft ?? 0} of the person's ids or texts still found in them, ${r.counts.pagesUnplaced ?? 0} page(s) that could not be scrubbed`;
  const state = (dir: string) => (r.snapshots.deleted.includes(dir) ? 'deleted' : r.snapshots.unverified?.includes(dir) ? 'cannot be ruled out, may still contain it' : 'still contains it');
  const inRedis = (dir: string) => dir.startsWith('redis:');
  for (const dir of r.snapshots.found) print`  ${inRedis(dir) ? 'redis record' : 'snapshot'} ${state(dir)}: ${dir}`;
  const left = r.snapshots.found.filter((d) => !inRedis(d) && !r.snapshots.deleted.includes(d));
  if (left.length > 0 && !r.dryRun) print`  (--snapshots deletes those folders)`;
  if ((r.unreached ?? []).length > 0) print`  not reached by this erase, each still to be reached by the operator:`;
  for (const u of r.unreached ?? []) print`    ${u.what}${u.facts ? ` (${Object.entries(u.facts).map(([k, v]) => `${k} ${String(v)}`).join(', ')})` : ''}: ${u.reach}`;
  if (r.redis && !r.redis.searched) print`  redis ${r.redis.notUsed ? 'not used' : 'NOT searched (unknown)'}: ${r.redis.reason ?? ''}`;
  for (const q of r.redis?.queued ?? []) print`  still queued: ${q} (run erase again once it is done)`;
}

/** What an engine that reads its files back verified, and what it cannot see: never "nothing left" where unknown. */
function printBytes(r: EraseReceipt, b: NonNullable<EraseReceipt['bytes']>): void {
  print`  vacuumed (VACUUM FULL) ${r.vacuumed ? 'yes' : 'NO: an agent held the table; run erase again'}`;
  const verdict = b.verdict === 'clean' ? `none of them found in the ${b.relations} relation file(s) read (${b.bytes} bytes)`
    : b.verdict === 'found' ? `${b.found.length} of them STILL FOUND (${b.found.map((f) => `${f.relation} at byte ${f.offset}`).join(', ')})`
      : 'NOT VERIFIED: some of the store\'s files could not be read or are compressed (below)';
  print`  byte check of the store's files: ${b.needles} erased text(s), field(s) and id(s) looked for, ${verdict}${b.shared > 0 ? `; ${b.shared} also held by rows that remain, not counted` : ''}`;
  print`  not seen by this check, each still to be reached by the operator:`;
  for (const u of b.unseen) print`    ${u.what}${u.facts ? ` (${Object.entries(u.facts).map(([k, v]) => `${k} ${String(v)}`).join(', ')})` : ''}: ${u.reach}`;
}
