import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { addStoreOptions, print, printJson, storeContext, type CommandContext, type StoreOptions } from './common.js';
import { usageError } from '../errors.js';
import { ensurePrivateDir, lockSnapshots, storeSnapshotDir } from '../snapshot/layout.js';
import { FETCH_PREFIX, fetchSnapshot, replicateStore, targetsFor, verifyRemote, withTarget } from '../snapshot/targets/replicate.js';
import { readRemoteManifest } from '../snapshot/targets/remote-manifest.js';
import { readJournal } from '../snapshot/journal.js';

/**
 * The remote side of `snapshots list|verify` and `restore`, with `--target NAME`, and `snapshots push`. The local
 * commands call in here when `--target` is given; nothing else of theirs changes.
 */

/** `snapshots list --target NAME [--verify]`: the target's complete snapshots, oldest first. */
export async function listRemote(ctx: CommandContext, targetName: string, verify: boolean, json: boolean): Promise<void> {
  const [tcfg] = targetsFor(ctx.config, ctx.storeName, targetName);
  const { where, entries } = await withTarget(tcfg!, ctx.storeName, async (t) => {
    const out = [];
    for (const name of await t.list()) {
      const got = await (verify ? verifyRemote(t, name) : readRemoteManifest(t, name)).then((m) => ({ m, problem: null }), (e: Error) => ({ m: null, problem: e.message }));
      const m = got.m;
      out.push({
        name, problem: got.problem, verified: verify ? (got.problem ? got.problem : 'ok') : null,
        reason: m?.reason ?? null, startedAt: m?.startedAt ?? null, rows: m?.sqlite.rows ?? null,
        bytes: m ? Object.values(m.remote.objects).reduce((n, o) => n + o.bytes, 0) : null,
        encryptedFor: m ? [...new Set(Object.values(m.remote.objects).flatMap((o) => o.encrypted?.recipients ?? []))] : null,
      });
    }
    return { where: t.where, entries: out };
  });
  if (entries.some((e) => e.problem)) process.exitCode = 1;
  if (json) return printJson({ store: ctx.storeName, target: targetName, where, snapshots: entries });
  print(`${ctx.storeName}: ${entries.length} snapshot(s) on target ${targetName} (${where})`);
  for (const e of entries) {
    if (e.problem) print(`  ${e.name}  NOT USABLE: ${e.problem}`);
    else print(`  ${e.name}  ${e.reason}  rows ${e.rows ?? '?'}  ${e.bytes} bytes${e.encryptedFor!.length ? `  encrypted for ${e.encryptedFor!.length} recipient(s)` : ''}${e.verified ? `  verify: ${e.verified}` : ''}`);
  }
}

/**
 * Download a remote snapshot (`latest` = the newest) into a `.fetch-` folder under the store's snapshot folder:
 * verified, decrypted, then handed to the ordinary restore. `cleanup` removes it after the restore; one a killed
 * run left is removed by the next upload run (replicate.ts), unless a pending restore journal still names it.
 */
export async function fetchForRestore(ctx: CommandContext, targetName: string, name: string): Promise<{ dir: string; from: string; cleanup(): void }> {
  const [tcfg] = targetsFor(ctx.config, ctx.storeName, targetName);
  const root = storeSnapshotDir(ctx.config, ctx.storeName);
  ensurePrivateDir(root);
  const lock = lockSnapshots(root, 'fetch'); // no snapshot run removes the folder while it is being filled
  try {
    return await withTarget(tcfg!, ctx.storeName, async (t) => {
      const all = await t.list();
      const pick = name === 'latest' ? all.filter((n) => !n.endsWith('-pre-restore')).at(-1) : all.find((n) => n === name);
      if (!pick) throw usageError(`target ${targetName} has no ${name === 'latest' ? 'complete snapshot' : `complete snapshot "${name}"`} of ${ctx.storeName} (${t.where})`);
      const dir = join(root, `${FETCH_PREFIX}${pick}-${process.pid}-${randomBytes(4).toString('hex')}`);
      try {
        await fetchSnapshot(t, tcfg!, pick, dir);
      } catch (err) {
        rmSync(dir, { recursive: true, force: true });
        throw err;
      }
      ctx.log.info({ store: ctx.storeName, target: targetName, snapshot: pick }, 'remote snapshot downloaded and verified');
      // Kept while a restore journal still names it: a killed restore resumes from it (or rolls back without it).
      const db = ctx.config.stores[ctx.storeName]!.db;
      const cleanup = () => (readJournal(db)?.from === dir ? undefined : rmSync(dir, { recursive: true, force: true }));
      return { dir, from: `${targetName}:${pick}`, cleanup };
    });
  } finally {
    lock.release();
  }
}

/** `snapshots verify` and `snapshots push`, under the existing `snapshots`. */
export function registerTargetCommands(program: Command): void {
  const snapshots = program.commands.find((c) => c.name() === 'snapshots');
  if (!snapshots) throw new Error('registerTargetCommands: register the snapshot commands first (no "snapshots" command)');
  addStoreOptions(snapshots.command('verify'))
    .description('re-read every file of every snapshot on a target and check its sha256 (exit 1 if one is bad); no identity needed')
    .requiredOption('--target <name>', 'which configured snapshot target')
    .option('--json', 'print one JSON object')
    .action(async (opts: StoreOptions & { target: string }, cmd: Command) => {
      await listRemote(storeContext(opts, cmd), opts.target, true, opts.json ?? false);
    });
  addStoreOptions(snapshots.command('push'))
    .description('upload the local snapshots a target lacks (the snapshot job does this after each snapshot), then its retention')
    .option('--target <name>', 'only this target')
    .option('--json', 'print one JSON object')
    .action(async (opts: StoreOptions & { target?: string }, cmd: Command) => {
      const ctx = storeContext(opts, cmd);
      if (opts.target) targetsFor(ctx.config, ctx.storeName, opts.target);
      const runs = await replicateStore(ctx.config, ctx.storeName, { log: ctx.log, now: ctx.now, only: opts.target });
      if (opts.json) return printJson({ store: ctx.storeName, targets: runs });
      if (runs.length === 0) print(`${ctx.storeName}: no snapshot targets configured`);
      for (const r of runs) print(`${ctx.storeName} → ${r.target} (${r.where}): uploaded ${r.uploaded.length}${r.uploaded.length ? ` (${r.uploaded.join(', ')})` : ''}, pruned ${r.pruned.length}, cleaned ${r.cleaned.length}`);
    });
}
