import type { Command } from 'commander';
import { addStoreOptions, onAnyEngine, print, printJson, storeContext, type StoreOptions } from './common.js';

/** `snapshots verify`, `snapshots keygen` and `snapshots push`, under the existing `snapshots`; their code loads when they run. */
export function registerTargetCommands(program: Command): void {
  const snapshots = program.commands.find((c) => c.name() === 'snapshots');
  if (!snapshots) throw new Error('registerTargetCommands: register the snapshot commands first (no "snapshots" command)');
  // Files on a target, whichever engine's store they are a snapshot of.
  onAnyEngine(addStoreOptions(snapshots.command('verify')))
    .description('re-read every file of every snapshot on a target and check its sha256 (exit 1 if one is bad); no identity needed')
    .requiredOption('--target <name>', 'which configured snapshot target')
    .option('--json', 'print one JSON object')
    .action(async (opts: StoreOptions & { target: string }, cmd: Command) => {
      const ctx = await storeContext(opts, cmd);
      await (await import('./targets-remote.js')).listRemote(ctx, opts.target, true, opts.json ?? false);
    });
  snapshots.command('keygen')
    .argument('<file>', 'where to write it: mode 0600, never over an existing file; keep a copy with the age identity, never on the target')
    .description("write a new target key, for a target's authKeyFile: the MAC of every manifest pushed, checked by list, verify, restore and erase")
    .option('--json', 'print one JSON object')
    .action(async (file: string, opts: { json?: boolean }) => {
      const { writeTargetKey } = await import('../snapshot/targets/auth.js');
      const keyId = writeTargetKey(file);
      if (opts.json) return printJson({ file, keyId });
      print`wrote a target key to ${file} (key id ${keyId}); set authKeyFile: ${file} on the target`;
    });
  onAnyEngine(addStoreOptions(snapshots.command('push')))
    .description('upload the local snapshots a target lacks (the snapshot job does this after each snapshot), then its retention')
    .option('--target <name>', 'only this target')
    .option('--json', 'print one JSON object')
    .action(async (opts: StoreOptions & { target?: string }, cmd: Command) => {
      const ctx = await storeContext(opts, cmd);
      const { replicateStore } = await import('../snapshot/targets/replicate.js');
      const runs = await replicateStore(ctx.config, ctx.storeName, { log: ctx.log, now: ctx.now, only: opts.target });
      if (opts.json) return printJson({ store: ctx.storeName, targets: runs });
      if (runs.length === 0) print`${ctx.storeName}: no snapshot targets configured`;
      for (const r of runs) print`${ctx.storeName} → ${r.target} (${r.where}): uploaded ${r.uploaded.length}${r.uploaded.length ? ` (${r.uploaded.join(', ')})` : ''}, pruned ${r.pruned.length}, cleaned ${r.cleaned.length}`;
    });
}
