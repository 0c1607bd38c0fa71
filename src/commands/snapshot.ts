import type { Command } from 'commander';
import { isAbsolute } from 'node:path';
import { addStoreOptions, onAnyEngine, print, printJson, routedToStoreHost, storeContext, storeNaming, storeWords, type StoreOptions } from './common.js';
import { interruptSignal, timeoutSeconds } from './waiting.js';
import { usageError } from '../core/errors.js';
import type { RestoreResult } from '../snapshot/restore.js';

/** `snapshots list` and `restore DIR`. */
export function registerSnapshotCommands(program: Command): void {
  const snapshots = program.command('snapshots').description('coordinated SQLite + Qdrant snapshots of a store');
  onAnyEngine(addStoreOptions(snapshots.command('list')))
    .description('list the snapshot folders of a store, oldest first (exit 1 if --verify finds a bad one)')
    .option('--verify', 'check every file against the sha256 in its manifest')
    .option('--target <name>', 'list the snapshots on this configured target instead (docs/snapshots.md#snapshots-off-the-machine)')
    .option('--json', 'print one JSON object')
    .action(async (opts: StoreOptions & { verify?: boolean; target?: string }, cmd: Command) => {
      const ctx = await storeContext(opts, cmd);
      if (opts.target) return (await import('./targets-remote.js')).listRemote(ctx, opts.target, opts.verify ?? false, opts.json ?? false);
      const [{ storeSnapshotDir }, { proveSnapshot, snapshotFolders }, { erasedSnapshotRecords }, { storePart }] = await Promise.all([
        import('../snapshot/layout.js'), import('../snapshot/folders.js'), import('../erase/restore-ledger.js'), import('../snapshot/manifest.js'),
      ]);
      const dir = storeSnapshotDir(ctx.config, ctx.storeName);
      const erased = erasedSnapshotRecords(ctx.config, ctx.storeName);
      const entries = [];
      for (const s of snapshotFolders(ctx.config, ctx.storeName)) {
        let verified: string | undefined;
        if (opts.verify && !s.problem) verified = (await proveSnapshot(s, ctx.storeName)) ?? 'ok';
        const m = s.manifest;
        entries.push({
          name: s.name, dir: s.dir, problem: s.problem ?? null, verified: verified ?? null,
          reason: m?.reason ?? null, seq: m?.seq ?? null, erased: erased.get(s.name) ?? null, startedAt: m?.startedAt ?? null, skewMs: m?.skewMs ?? null, rows: m ? storePart(m).rows : null,
          points: m ? Object.fromEntries(m.qdrant.map((p) => [p.collection, p.points])) : null,
          bytes: m ? Object.values(m.files).reduce((n, f) => n + f.bytes, 0) : null,
        });
      }
      const bad = entries.filter((e) => e.problem || (e.verified && e.verified !== 'ok'));
      if (bad.length > 0) process.exitCode = 1;
      if (opts.json) return printJson({ store: ctx.storeName, dir, snapshots: entries });
      print`${ctx.storeName}: ${entries.length} snapshot(s) in ${dir}`;
      for (const e of entries) {
        if (e.problem) {
          print`  ${e.name}  NOT USABLE: ${e.problem}`;
          continue;
        }
        const points = Object.entries(e.points ?? {}).map(([c, n]) => `${c} ${n}`).join(', ');
        const gone = e.erased ? `  ${(await import('./targets-remote.js')).erasedNote(e.erased)}` : '';
        print`  ${e.name}  ${e.reason}  rows ${e.rows ?? '?'}${points ? `  points ${points}` : ''}  ${e.bytes} bytes${points ? `  skew ${e.skewMs} ms` : ''}${e.verified ? `  verify: ${e.verified}` : ''}${gone}`;
      }
    });

  restoreCommand(program.command('restore'));
  const run = program.commands.find((c) => c.name() === 'run');
  if (!run) throw new Error('registerSnapshotCommands: register the core commands first (no "run" command)');
  restoreCommand(run.command('restore'));
}

/**
 * The restore command, as `restore` and as `run restore`: a store on another host is restored there, by its
 * host's worker (routedToStoreHost).
 */
function restoreCommand(cmd: Command): Command {
  // The restore reaches the store through its engine (restore.ts, restore-tables.ts).
  return onAnyEngine(routedToStoreHost(addStoreOptions(cmd.argument('<dir>', 'the snapshot folder, or the name of one of the store\'s snapshots, or "latest"; with --target, the snapshot name on that target (or "latest")'))))
    .description('verify every checksum, then restore SQLite and every Qdrant collection (or a PostgreSQL store\'s tables) from one snapshot: all or nothing; the erase ledger is re-applied to what is restored')
    .option('--force', 'restore even while the store is open elsewhere, or when no pre-restore snapshot can be taken')
    .option('--dry-run', 'verify and say what would be done; change nothing')
    .option('--now <time>', 'name the pre-restore snapshot as of this ISO-8601 time')
    .option('--target <name>', 'download the snapshot from this configured target, verify and decrypt it, then restore it')
    .option('--without-erase-ledger', 'restore although the erase ledger (state db and erase key) is not here to re-apply: memories erased since the snapshot was taken may come back')
    .option('--timeout <seconds>', "a store on another host: how long to wait for that host's worker; then, as on Ctrl-C, a request it has not taken is withdrawn", '3600')
    .option('--json', 'print one JSON object')
    .action(async (dir: string, opts: StoreOptions & { force?: boolean; dryRun?: boolean; target?: string; withoutEraseLedger?: boolean; timeout: string }, cmd: Command) => {
      const waitSeconds = timeoutSeconds(opts.timeout);
      const ctx = await storeContext(opts, cmd);
      const flags = { force: opts.force ?? false, dryRun: opts.dryRun ?? false, ...(opts.withoutEraseLedger ? { withoutEraseLedger: true } : {}) };
      // A store on another machine is restored there, by its host's worker, from a folder on that machine.
      const host = ctx.storeHost;
      if (host && opts.target) throw usageError(`restore --target: ${ctx.storeName} lives on host ${host}: run restore --target on that machine`);
      if (host && !isAbsolute(dir)) throw usageError(`restore: ${ctx.storeName} lives on host ${host}: give the snapshot folder as an absolute path on that machine`);
      const fetched = opts.target ? await (await import('./targets-remote.js')).fetchForRestore(ctx, opts.target, dir) : undefined;
      const local = host || fetched ? dir : (await import('../snapshot/latest.js')).localSnapshotDir(ctx.config, ctx.storeName, dir);
      let cleanedUp: string | undefined;
      const result = host
        ? ((await (await import('../queue/remote.js')).runOnHost({
            config: ctx.config, log: ctx.log, job: 'restore', data: { store: ctx.storeName, dir, ...flags }, timeoutSeconds: waitSeconds,
            // Nobody waits any more (Ctrl-C, the timeout): a request no worker has taken is withdrawn, so the host
            // does not restore a store the person gave up on; one already running finishes there.
            withdrawUnwaited: true, signal: interruptSignal(),
          })) as RestoreResult)
        : await (await import('../snapshot/restore.js')).restoreSnapshot(ctx.config, ctx.storeName, fetched?.dir ?? local, {
            now: ctx.now, log: ctx.log, ...flags, progress: ctx.progress, ...(fetched ? { madeUnderKey: fetched.holdsKeyId } : {}), storeNaming: await storeNaming(opts),
          })
          .finally(() => (cleanedUp = fetched?.cleanup()));
      if (fetched) {
        result.from = fetched.from;
        result.steps.unshift(fetched.step);
        if (cleanedUp) result.steps.push(cleanedUp);
      }
      // Bytes of an erased memory possibly left in the restored store: not done, as erase says while a copy remains.
      if (result.erasedLeft) process.exitCode = 1;
      if (opts.json) return printJson(result);
      (await import('./run-output.js')).printRestore(result, await storeWords(opts, ctx.storeName));
    });
}
