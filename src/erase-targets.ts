import type { Config } from './config.js';
import type { Logger } from './logger.js';
import { coerceError } from './errors.js';
import { expandHome } from './config.js';
import { eraseKey } from './erase-ledger.js';
import { HOLDS_KEY, holdsContain, idMac, userMac } from './snapshot/targets/holds.js';
import { lockSnapshots, storeSnapshotDir } from './snapshot/layout.js';
import type { withTarget } from './snapshot/targets/replicate.js';
import { readRemoteManifest } from './snapshot/targets/remote-manifest.js';

/**
 * Erase's reach into snapshot targets: the remote snapshots holding an erased memory or user, found through each
 * snapshot's `holds.json.gz` (keyed hashes of its ids and users), never by reading its content, so encrypted ones
 * are found too. A snapshot whose holds were made with another erase key, or cannot be read, or a target that
 * cannot be reached, is reported as found (it cannot be ruled out): the receipt lists it and erase exits 1 until it
 * is dealt with. With `remove`, found snapshots are deleted (manifest first).
 *
 * Labels: `target:<name>/<snapshot>`; an unreachable target is `target:<name> (unreachable: …)`.
 */
export async function remoteSnapshotCopies(
  config: Config, store: string, erased: { ids: string[]; user?: string }, opts: { remove: boolean; log: Logger },
): Promise<{ found: string[]; deleted: string[] }> {
  const found: string[] = [];
  const deleted: string[] = [];
  // The targets' code (with its encryption) loads only when targets are configured.
  if (config.snapshot.targets.length === 0) return { found, deleted };
  const { targetsFor } = await import('./snapshot/targets/replicate.js');
  const targets = targetsFor(config, store);
  if (targets.length === 0 || (erased.ids.length === 0 && erased.user === undefined)) return { found, deleted };
  // Uploads stay out meanwhile, so no snapshot becomes complete on a target behind the search.
  const lock = opts.remove ? lockSnapshots(storeSnapshotDir(config, store), 'erase') : undefined;
  try {
    await searchTargets(config, store, erased, opts, found, deleted);
  } finally {
    lock?.release();
  }
  return { found, deleted };
}

async function searchTargets(
  config: Config, store: string, erased: { ids: string[]; user?: string }, opts: { remove: boolean; log: Logger }, found: string[], deleted: string[],
): Promise<void> {
  const { keyId, targetsFor, withTarget } = await import('./snapshot/targets/replicate.js');
  const targets = targetsFor(config, store);
  const key = eraseKey(expandHome(config.stateDb));
  const ids = new Set(erased.ids.map((id) => idMac(key, id)));
  const user = erased.user === undefined ? undefined : userMac(key, erased.user);
  for (const tcfg of targets) {
    try {
      await withTarget(tcfg, store, async (t) => {
        for (const name of await t.list()) {
          const why = await holdsMatch(t, name, keyId(key), ids, user);
          if (!why) continue;
          const label = `target:${tcfg.name}/${name}`;
          found.push(label);
          if (why !== 'holds') opts.log.warn({ store, target: tcfg.name, snapshot: name, why }, 'cannot rule out that a remote snapshot holds the erased data');
          if (opts.remove) {
            await t.delete(name);
            deleted.push(label);
          }
        }
      });
    } catch (err) {
      const e = coerceError(err);
      opts.log.error({ store, target: tcfg.name, err: e.message }, 'erase could not look into a snapshot target');
      found.push(`target:${tcfg.name} (unreachable: ${e.message.slice(0, 200)})`);
    }
  }
}

/** 'holds' when the snapshot holds an erased id or user; another reason when that cannot be ruled out; else null. */
async function holdsMatch(t: Parameters<Parameters<typeof withTarget>[2]>[0], name: string, kid: string, ids: Set<string>, user: string | undefined): Promise<string | null> {
  let m;
  try {
    m = await readRemoteManifest(t, name);
  } catch (err) {
    return `unreadable manifest: ${(err as Error).message}`;
  }
  if (m.remote.holds.keyId !== kid) return `its holds were made with another erase key (${m.remote.holds.keyId})`;
  try {
    return (await holdsContain(await t.get(name, HOLDS_KEY), { ids, user }, `${t.name}:${name}`)) ? 'holds' : null;
  } catch (err) {
    return `unreadable ${HOLDS_KEY}: ${(err as Error).message}`;
  }
}
