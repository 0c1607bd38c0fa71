import type { Config } from '../config/config.js';
import type { Strings } from '../text/string-list.js';
import type { Logger } from '../log/logger.js';
import { coerceError } from '../core/errors.js';
import { expandHome } from '../config/config.js';
import { eraseKey } from './ledger.js';
import { recordErasedSnapshots } from './needles.js';
import { HOLDS_KEY, holdsComplete, holdsContain, idMac, userMac } from '../snapshot/targets/holds.js';
import { hashing } from '../snapshot/targets/digest.js';
import { lockSnapshots, storeSnapshotDir } from '../snapshot/layout.js';
import type { withTarget } from '../snapshot/targets/replicate.js';
import { UnverifiedSnapshotError } from '../snapshot/targets/types.js';
import type { Manifest } from '../snapshot/manifest.js';

/**
 * Erase's reach into snapshot targets: the remote snapshots holding an erased memory or user, found through each
 * snapshot's `holds.json.gz` (keyed hashes of its ids and users), never by reading its content, so encrypted ones
 * are found too. The ids are this run's and those earlier erases of the same selector erased (erase-needles.ts).
 * A target's copy of a local snapshot found to hold it (the same files, by their digests) holds it too: a row pruned
 * before an erase --subject is found there through the text its local twin holds. A snapshot whose holds were made
 * with another erase key, or cannot be read, or do not match the digest its manifest recorded for them (a replaced
 * holds file says nothing), or a target that cannot be reached, is reported as found (it cannot be ruled out): the
 * receipt lists it (and among `unverified`) and erase exits 1 until it is dealt with. With `remove`, found snapshots
 * are recorded as erased (replicate never uploads them again), then deleted (manifest first, claim last) when
 * memory-warden can prove it made them; one it cannot prove (a manifest that does not verify) is left for a person.
 *
 * Whoever is erased, everything else under the store's prefix is listed too (snapshot/copies.ts): folders without a
 * manifest (an upload or a delete that was killed: removed with `cleanup` when their claim.json proves them
 * memory-warden's, else left for a person), and what killed puts left (temp files, unfinished multipart uploads this
 * machine journaled, spool files: removed with `cleanup`, as the next push would). `cleaned` lists what cleanup removed.
 *
 * Labels: `target:<name>/<snapshot>`; a storage leftover `target:<name>:<where>`; an unreachable target
 * `target:<name> (unreachable: …)`.
 */
export async function remoteSnapshotCopies(
  config: Config, store: string, erased: { ids: Strings; user?: string | undefined; earlier?: readonly string[] },
  opts: { remove: boolean; cleanup?: boolean; log: Logger; now?: () => number; holding?: ReadonlyMap<string, Manifest['files']> },
): Promise<RemoteCopies> {
  const out: RemoteCopies = { found: [], deleted: [], unverified: [], cleaned: [] };
  // The targets' code (with its encryption) loads only when targets are configured.
  if (config.snapshot.targets.length === 0) return out;
  const { targetsFor } = await import('../snapshot/targets/replicate.js');
  if (targetsFor(config, store).length === 0) return out;
  // Uploads stay out meanwhile, so no snapshot becomes complete (nor an upload leaves something) behind the search.
  const lock = opts.remove || opts.cleanup ? lockSnapshots(storeSnapshotDir(config, store), 'erase') : undefined;
  try {
    await searchTargets(config, store, erased, opts, out);
  } finally {
    lock?.release();
  }
  return out;
}

export interface RemoteCopies {
  found: string[];
  deleted: string[];
  unverified: string[];
  /** Of `deleted`, the leftovers of killed runs (not snapshots). */
  cleaned: string[];
}

async function searchTargets(
  config: Config, store: string, erased: Parameters<typeof remoteSnapshotCopies>[2], opts: Parameters<typeof remoteSnapshotCopies>[3], out: RemoteCopies,
): Promise<void> {
  const { keyId, targetsFor, withTarget } = await import('../snapshot/targets/replicate.js');
  const stateDb = expandHome(config.stateDb);
  const key = eraseKey(config);
  const want = holdsWanted(key, erased);
  const holding = opts.holding ?? new Map<string, Manifest['files']>();
  const searched = !(wantsNothing(want) && holding.size === 0);
  for (const tcfg of targetsFor(config, store)) {
    try {
      await withTarget(tcfg, store, async (t) => {
        const complete = await t.list();
        for (const name of searched ? complete : []) {
          const why = await holdsMatch(t, name, keyId(key), want, holding.get(name));
          if (!why) continue;
          const label = `target:${tcfg.name}/${name}`;
          out.found.push(label);
          if (why !== 'holds') out.unverified.push(label);
          if (why !== 'holds') opts.log.warn({ store, target: tcfg.name, snapshot: name, why }, 'cannot rule out that a remote snapshot holds the erased data');
          if (opts.remove) {
            recordErasedSnapshots(stateDb, store, [name], opts.now?.() ?? Date.now());
            if (await deleteProven(t, name, label, opts.log, out)) out.deleted.push(label);
          }
        }
        await leftoversOf(t, new Set(complete), opts, out);
      });
    } catch (err) {
      const e = coerceError(err);
      opts.log.error({ store, target: tcfg.name, err: e.message }, 'erase could not look into a snapshot target');
      const label = `target:${tcfg.name} (unreachable: ${e.message.slice(0, 200)})`;
      out.found.push(label);
      out.unverified.push(label);
    }
  }
}

/** Delete a folder memory-warden can prove it made; one it cannot is left (found, cannot be ruled out) and said so. */
async function deleteProven(t: Target, name: string, label: string, log: Logger, out: RemoteCopies): Promise<boolean> {
  try {
    await t.delete(name);
    return true;
  } catch (err) {
    if (!(err instanceof UnverifiedSnapshotError)) throw err;
    if (!out.unverified.includes(label)) out.unverified.push(label);
    log.warn({ target: t.name, snapshot: name, why: err.message }, 'a remote folder that may hold the erased data is not proven memory-warden\'s: not deleted; a person decides');
    return false;
  }
}

/**
 * What killed runs left on a target, whoever is erased (snapshot/copies.ts): folders without a manifest, and what the
 * storage itself left. A leftover cannot be ruled out without reading it: each is found, and with `cleanup` removed
 * when memory-warden can prove it made it.
 */
async function leftoversOf(t: Target, complete: ReadonlySet<string>, opts: Parameters<typeof remoteSnapshotCopies>[3], out: RemoteCopies): Promise<void> {
  // What the storage left first (a temp file can be all a folder holds), then the folders without a manifest.
  const left = await t.leftovers();
  out.found.push(...left.map((l) => `target:${l}`));
  if (opts.cleanup && left.length > 0) {
    await t.storage.cleanPartial();
    const still = new Set(await t.leftovers());
    for (const l of left) {
      if (still.has(l)) out.unverified.push(`target:${l}`);
      else {
        out.deleted.push(`target:${l}`);
        out.cleaned.push(`target:${l}`);
      }
    }
  }
  for (const name of (await t.names()).filter((n) => !complete.has(n))) {
    const label = `target:${t.name}/${name}`;
    out.found.push(label);
    const why = await t.unproven(name);
    if (why) {
      out.unverified.push(label);
      opts.log.warn({ target: t.name, snapshot: name, why }, 'a folder without a manifest under the store\'s prefix on a target is not proven memory-warden\'s: not removed; a person decides');
    } else if (opts.cleanup) {
      await t.delete(name);
      out.deleted.push(label);
      out.cleaned.push(label);
    }
  }
}

type Target = Parameters<Parameters<typeof withTarget>[2]>[0];

/**
 * 'holds' when the snapshot holds an erased id or user; another reason when that cannot be ruled out; else null.
 * "Holds none of them" is believed only of a holds file read to its end whose digest is the one the manifest
 * recorded: any error reading or checking it means it cannot be ruled out.
 */
async function holdsMatch(t: Target, name: string, kid: string, want: HoldsWanted, local: Manifest['files'] | undefined): Promise<string | null> {
  let m;
  try {
    // Loaded here, with the targets' code: it brings the encryption, which an erase without targets never needs.
    const { readRemoteManifest } = await import('../snapshot/targets/remote-manifest.js');
    m = await readRemoteManifest(t, name);
  } catch (err) {
    return `unreadable manifest: ${(err as Error).message}`;
  }
  // An upload of a local snapshot found to hold it (by its text, say: a row pruned before the erase, whose id the
  // erase never saw) holds the same bytes.
  if (local && sameFiles(m.files, local)) return 'holds';
  const rec = m.remote.holds as Partial<typeof m.remote.holds> | undefined;
  if (!rec || typeof rec.sha256 !== 'string' || typeof rec.bytes !== 'number') return `its manifest records no ${HOLDS_KEY}`;
  if (rec.keyId !== kid) return `its holds were made with another erase key (${String(rec.keyId)})`;
  // Pushed before holds named every layout's ids and people (a Mastra store's named nobody): they prove nothing.
  if (!holdsComplete(rec.format, m)) return `its holds were made before they named what its copy's layout names (format ${String(rec.format ?? 1)})`;
  try {
    const stored = hashing(await t.get(name, HOLDS_KEY));
    if (await holdsContain(stored.stream, want, `${t.name}:${name}`)) return 'holds';
    for await (const _ of stored.stream) void _; // whatever follows the JSON counts too
    const got = stored.digest();
    if (got.sha256 !== rec.sha256 || got.bytes !== rec.bytes) return `${HOLDS_KEY} is not the one its manifest recorded (sha256 ${got.sha256}, ${got.bytes} bytes)`;
    return null;
  } catch (err) {
    return `unreadable ${HOLDS_KEY}: ${(err as Error).message}`;
  }
}

function sameFiles(a: Manifest['files'], b: Manifest['files']): boolean {
  const names = Object.keys(a);
  return names.length === Object.keys(b).length && names.every((n) => b[n] !== undefined && b[n]!.sha256 === a[n]!.sha256 && b[n]!.bytes === a[n]!.bytes);
}

/** What a snapshot's holds are searched for: the hashes of the erased ids (this run's and earlier runs') and user. */
interface HoldsWanted {
  ids: ReadonlySet<string>;
  user?: string;
}

function holdsWanted(key: Buffer, erased: { ids: Strings; user?: string | undefined; earlier?: readonly string[] }): HoldsWanted {
  const ids = new Set(erased.earlier ?? []);
  for (const id of erased.ids) ids.add(idMac(key, id));
  return erased.user === undefined ? { ids } : { ids, user: userMac(key, erased.user) };
}

const wantsNothing = (w: HoldsWanted) => w.ids.size === 0 && w.user === undefined;
