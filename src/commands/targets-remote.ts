import { rmSync } from 'node:fs';
import { print, printJson, type CommandContext } from './common.js';
import { usageError } from '../core/errors.js';
import { ensurePrivateDir, lockSnapshots, storeSnapshotDir } from '../snapshot/layout.js';
import { fetchSnapshot, targetsFor, verifyRemote, withTarget } from '../snapshot/targets/replicate.js';
import { fetchFolder } from '../snapshot/copies.js';
import { readRemoteManifest, type RemoteManifest } from '../snapshot/targets/remote-manifest.js';
import { readJournal, restoreJournalBase } from '../snapshot/journal.js';
import { lastPushed } from '../snapshot/targets/pushed.js';
import { olderFirst } from '../snapshot/folders.js';
import { erasedSnapshotRecords } from '../erase/restore-ledger.js';
import { storePart } from '../snapshot/manifest.js';
import type { CheckedTarget } from '../snapshot/targets/checked.js';

/**
 * The remote side of `snapshots list|verify` and `restore`, with `--target NAME`. The local commands load this
 * module only when `--target` is given; nothing else of theirs changes.
 */

/**
 * `snapshots list --target NAME [--verify]`: the target's complete snapshots, oldest first by their manifests'
 * sequence numbers (as retention orders them), those that cannot be read or verified after; one an erase removed (erased_snapshots) that is there again is marked
 * `erased`.
 */
export async function listRemote(ctx: CommandContext, targetName: string, verify: boolean, json: boolean): Promise<void> {
  const [tcfg] = targetsFor(ctx.config, ctx.storeName, targetName);
  const erased = erasedSnapshotRecords(ctx.config, ctx.storeName);
  const { where, entries } = await withTarget(tcfg!, ctx.storeName, async (t) => {
    const out = [];
    const read = [];
    for (const name of await t.list()) {
      const got = await (verify ? verifyRemote(t, name) : readRemoteManifest(t, name)).then((m) => ({ m, problem: null }), (e: Error) => ({ m: null, problem: e.message }));
      read.push({ name, ...got, ...(got.m ? { manifest: got.m } : {}) });
    }
    // Usable ones oldest first by sequence number; then the rest, by name.
    const ordered = [...read.filter((r) => r.m).sort(olderFirst), ...read.filter((r) => !r.m)];
    for (const { name, m, problem } of ordered) {
      out.push({
        name, problem, verified: verify ? (problem ? problem : 'ok') : null,
        reason: m?.reason ?? null, seq: m?.seq ?? null, startedAt: m?.startedAt ?? null, rows: m ? storePart(m).rows : null,
        bytes: m ? Object.values(m.remote.objects).reduce((n, o) => n + o.bytes, 0) : null,
        encryptedFor: m ? [...new Set(Object.values(m.remote.objects).flatMap((o) => o.encrypted?.recipients ?? []))] : null,
        erased: erased.get(name) ?? null,
      });
    }
    return { where: t.where, entries: out };
  }, ctx.log);
  if (entries.some((e) => e.problem)) process.exitCode = 1;
  if (json) return printJson({ store: ctx.storeName, target: targetName, where, snapshots: entries });
  print`${ctx.storeName}: ${entries.length} snapshot(s) on target ${targetName} (${where})`;
  for (const e of entries) {
    if (e.problem) print`  ${e.name}  NOT USABLE: ${e.problem}`;
    else print`  ${e.name}  ${e.reason}  rows ${e.rows ?? '?'}  ${e.bytes} bytes${e.encryptedFor!.length ? `  encrypted for ${e.encryptedFor!.length} recipient(s)` : ''}${e.verified ? `  verify: ${e.verified}` : ''}${e.erased ? `  ${erasedNote(e.erased)}` : ''}`;
  }
}

/** How `snapshots list` marks a snapshot an erase removed that is there again. */
export const erasedNote = (at: string) => `ERASED (an erase removed it ${at}; never restored as latest, and a restore of it by name keeps the erased memories out)`;

/**
 * `latest` on a target: its newest complete scheduled snapshot by the sequence number in its manifest (the order
 * retention trusts; names come from a clock that can be stepped back), none an erase removed, none whose manifest
 * does not verify.
 */
async function latestOn(t: CheckedTarget, erased: ReadonlyMap<string, string>): Promise<{ name: string; manifest: RemoteManifest } | undefined> {
  const usable = [];
  let refused: unknown;
  for (const name of (await t.list()).filter((n) => !n.endsWith('-pre-restore') && !erased.has(n))) {
    const manifest = await readRemoteManifest(t, name).catch((err: unknown) => void (refused = err));
    if (manifest) usable.push({ name, manifest });
  }
  // None usable: why the last one was refused (a missing MAC, a forgery) says more than "none".
  if (usable.length === 0 && refused !== undefined) throw refused;
  return usable.sort(olderFirst).at(-1);
}

/**
 * Download a remote snapshot (`latest` = the newest by sequence number that no erase removed, refused when older
 * than the newest this machine pushed there and no erase removed)
 * into a `.fetch-` folder under the store's snapshot folder (copies.ts: `fetch`): verified, decrypted (a plaintext
 * copy: `step` says where it is), then handed to the ordinary restore. `cleanup` removes it after the restore and
 * says so; one a killed run left is removed by the next erase or upload run, unless a pending restore journal still
 * names it.
 */
export async function fetchForRestore(ctx: CommandContext, targetName: string, name: string): Promise<{ dir: string; from: string; step: string; cleanup(): string; holdsKeyId: string }> {
  const [tcfg] = targetsFor(ctx.config, ctx.storeName, targetName);
  const root = storeSnapshotDir(ctx.config, ctx.storeName);
  ensurePrivateDir(root);
  const lock = lockSnapshots(root, 'fetch'); // no snapshot run removes the folder while it is being filled
  try {
    return await withTarget(tcfg!, ctx.storeName, async (t) => {
      const erased = erasedSnapshotRecords(ctx.config, ctx.storeName);
      const latest = name === 'latest' ? await latestOn(t, erased) : undefined;
      const pick = name === 'latest' ? latest?.name : (await t.list()).find((n) => n === name);
      if (!pick) throw usageError(`target ${targetName} has no ${name === 'latest' ? 'complete snapshot (none an erase removed)' : `complete snapshot "${name}"`} of ${ctx.storeName} (${t.where})`);
      const pushed = name === 'latest' ? lastPushed(root, targetName, new Set(erased.keys())) : null;
      // Newer than the one picked, by the order retention trusts; a record from before sequence numbers, by name.
      const seq = latest?.manifest.seq;
      const newer = pushed !== null && pushed.name !== pick && (pushed.seq !== null && seq !== undefined ? pushed.seq > seq : pushed.name > pick);
      if (pushed !== null && newer) {
        throw usageError(`restore latest: the newest snapshot of ${ctx.storeName} on target ${targetName} is ${pick}, older than ${pushed.name}, which this machine pushed there: newer ones were deleted (by hand, by erase --snapshots, or by whoever can write the target) or are withheld; restore ${pick} by name to go back that far`);
      }
      const dir = fetchFolder(root, pick);
      ctx.log.info({ store: ctx.storeName, target: targetName, snapshot: pick, dir }, 'downloading a remote snapshot into a private folder (a plaintext copy until the restore ends)');
      let holdsKeyId: string;
      try {
        holdsKeyId = (await fetchSnapshot(t, tcfg!, pick, dir)).remote.holds.keyId;
      } catch (err) {
        rmSync(dir, { recursive: true, force: true });
        throw err;
      }
      ctx.log.info({ store: ctx.storeName, target: targetName, snapshot: pick, dir }, 'remote snapshot downloaded and verified');
      // Kept while a restore journal still names it: a killed restore resumes from it (or rolls back without it).
      const journal = restoreJournalBase(ctx.config, ctx.storeName);
      const cleanup = () => {
        if (readJournal(journal)?.from === dir) return `kept the download ${dir}: the interrupted restore resumes from it (erase removes it once the restore is finished)`;
        rmSync(dir, { recursive: true, force: true });
        return `removed the download ${dir}`;
      };
      const step = `downloaded ${targetName}:${pick} into ${dir} and verified it${tcfg!.encrypt ? ', decrypted: a plaintext copy while it exists' : ''}`;
      return { dir, from: `${targetName}:${pick}`, step, cleanup, holdsKeyId };
    }, ctx.log);
  } finally {
    lock.release();
  }
}
