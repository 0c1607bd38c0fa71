import { createHmac } from 'node:crypto';
import type { Config } from '../config/config.js';
import { expandHome } from '../config/config.js';
import { silentLogger } from '../log/logger.js';
import { openStoreOnEngine } from '../layouts/open.js';
import { assertIntact, assertIntactLines, busyTimeoutMs, journalMode } from '../store/sqlite.js';
import { idleWorker, startStoreWorker, type StoreWorker } from './worker.js';
import { withMaintenanceLock } from '../store/lock.js';
import { collectionSnapshotsFor } from '../vectors/registry.js';
import { recordReceipt } from './receipts.js';
import { snapshotCopies } from './snapshots.js';
import { remoteSnapshotCopies } from './targets.js';
import { assertNoPendingRestore, restoreJournalBase } from '../snapshot/journal.js';
import { compactState, scrubState, type Place, type StateTarget } from './state.js';
import type { RedisSweep } from './redis.js';
import { deletedFor } from './ledger.js';
import { eraseKey, eraseKeyId } from './key.js';
import { earlierIdMacs, idMacsOf, recordErasedIdMacs, recordErasedSelector, selectorMac } from './needles.js';
import { eraseLeftovers, type Leftovers } from './leftovers.js';
import { openStateDb, queueUsed } from '../state/state.js';
import type { Db } from '../store/sqlite.js';
import { usageError } from '../core/errors.js';
import { jobsOf, layoutOf } from '../layouts/registry.js';
import { engineFor } from '../engines/registry.js';
import type { ByteCheck, PostgresStoreHandle } from '../engines/contract.js';
import { toCanonical } from '../time/instants.js';
import type { EraseOptions, EraseSelector, Erased, StoreHandle } from '../layouts/contract.js';
import { memberOf, StringList, type Strings } from '../text/string-list.js';
import { holdYoungGeneration, pollYoungGeneration } from '../core/young-generation.js';

// The selector, options and a layout's result are the layout contract's vocabulary (src/layouts/contract.ts).
export type { EraseOptions, EraseSelector, Erased } from '../layouts/contract.js';
export { payloadStrings } from '../layouts/erase-sweep.js';

/**
 * Erase (right to erasure): every memory of a person or subject, from every part of a store — rows with their
 * cascade, points in every collection, mem0's history text and kept conversation — on a connection with
 * secure_delete on, then VACUUM and a WAL checkpoint(TRUNCATE), so the text is in no page, free page or WAL frame
 * of the file. memory-warden's own copies go too: its records in the state db (erase-state.ts, then the same
 * VACUUM and checkpoint there) and every copy its killed jobs left (leftovers.ts, src/snapshot/copies.ts). A receipt says
 * what was erased and where, never what it said. Snapshots still hold the data: erase lists the snapshot folders
 * that contain it and, when asked, deletes them.
 */

export type { EraseReceipt } from './receipts.js';
import type { EraseReceipt } from './receipts.js';

const MIN_SUBJECT = 3;
/** The state db's page cache during an erase (eraseStoreAndRecords). */
const STATE_CACHE_KB = 2000;

/**
 * The receipt's digests, keyed: the selector's is the one the erase ledger files it under (needles.ts: `--subject`
 * in any ASCII case, `--ids` in any order), the erased ids' an HMAC of them sorted. An unkeyed hash of an address, a
 * name or a memory id is found by hashing guesses; these are not, without the erase key.
 */
function describeSelector(key: Buffer, sel: EraseSelector): { kind: EraseReceipt['selector']; digest: string } {
  return { kind: 'user' in sel ? 'user' : 'subject' in sel ? 'subject' : 'ids', digest: selectorMac(key, sel) };
}

/** Made once the copies are searched (nothing else is held by then): the ids sorted are a moment's garbage. */
const idsMac = (key: Buffer, ids: Strings) => createHmac('sha256', key).update(`erased ids:${[...ids].sort().join('\n')}`, 'utf8').digest('hex');

export function validateSelector(sel: EraseSelector): void {
  if ('user' in sel && sel.user.trim() === '') throw usageError('erase --user: an empty id would match nothing');
  if ('subject' in sel && sel.subject.trim().length < MIN_SUBJECT) throw usageError(`erase --subject: at least ${MIN_SUBJECT} characters (a shorter text matches far more than one person)`);
  if ('ids' in sel && sel.ids.length === 0) throw usageError('erase --ids: no ids given');
}


export async function erase(config: Config, storeName: string, sel: EraseSelector, opts: EraseOptions): Promise<EraseReceipt> {
  validateSelector(sel);
  const log = opts.log ?? silentLogger;
  const dryRun = opts.dryRun ?? false;
  // A restore half done keeps erase off: its journal lies beside the store's file, or among a database store's snapshots.
  if (!dryRun && config.stores[storeName]) assertNoPendingRestore(restoreJournalBase(config, storeName));
  // The receipt must be recordable before anything is erased: a state db that cannot be written fails here.
  if (!dryRun && opts.record !== false) openStateDb(expandHome(config.stateDb)).close();
  // The erase key, checked against the state db: a missing or another key is refused before anything changes.
  const key = eraseKey(config);
  const store = await openStoreOnEngine(config, storeName);
  let bytes: ByteCheck | undefined;
  let erased: Erased = { ids: [], counts: {}, texts: [] };
  let vacuumed = false;
  let walTruncated = false;
  let found: string[] = [];
  let deleted: string[] = [];
  let unverified: string[] = [];
  const stateDb = expandHome(config.stateDb);
  const subject = 'subject' in sel ? sel.subject : undefined;
  let statePlaces: Place[] = [];
  let fileCounts: Leftovers['counts'] = { staging: 0, partial: 0, retired: 0, fetch: 0 };
  let localDeleted = 0;
  let remoteDeleted = 0;
  let remoteCleaned = 0;
  let stateWalTruncated = !dryRun;
  let redis: RedisSweep | undefined;
  // memory-warden's jobs in Redis (redis.ts): searched for the same texts, ids and subject as the state db.
  // Nothing of this state db's ever went through a queue: no copy can be there, and Redis (when one runs at all) is
  // not asked: an erase on a machine without a worker neither waits on an address that never answers nor loads BullMQ.
  const sweepRedis = async (state: Db, t: StateTarget, dry: boolean): Promise<RedisSweep> => {
    const use = queueUsed(state);
    if (!use.used) return { searched: false, notUsed: true, reason: use.why, found: [], deleted: [], unverified: [], queued: [], places: [] };
    return (await import('./redis.js')).eraseRedisCopies(config, t, { dryRun: dry, log, state });
  };
  // What the erase holds grows with the memories it takes by their bytes, not by V8's young generation
  // (src/core/young-generation.ts).
  const releaseYoung = holdYoungGeneration();
  try {
    // Under the store's maintenance lock, which the snapshot job holds too: no snapshot is half-written meanwhile.
    const copies = async (texts: Strings, ids: Strings, earlier: string[]) => {
          // Copies killed runs left (snapshot/copies.ts): removed whoever is erased, listed first.
          const left = await eraseLeftovers(config, storeName, { remove: !dryRun, log, q: collectionSnapshotsFor({ qdrant: store.config.qdrant, open: store.vectors }) });
          fileCounts = left.counts;
          // Local and remote snapshots are searched for the same ids and user (their keyed hashes): those erased
          // now, those named by --ids, and those earlier erases of this selector erased (erase-needles.ts).
          const person = { ids: 'ids' in sel ? withNamed(ids, sel.ids) : ids, user: 'user' in sel ? sel.user : undefined, earlier };
          const remove = !dryRun && (opts.snapshots ?? false);
          const holds = { key, store: storeName, ...person };
          const local = await snapshotCopies(config, storeName, texts, subject, { remove, log, holds, stateDb, now: opts.now });
          found = [...left.found, ...local.found];
          deleted = [...left.deleted, ...local.deleted];
          unverified = [...left.unverified, ...local.unverified];
          localDeleted = local.deleted.length;
          const remote = await remoteSnapshotCopies(config, storeName, person, { remove, cleanup: !dryRun, log, now: opts.now, holding: local.holding });
          found.push(...remote.found);
          deleted.push(...remote.deleted);
          unverified.push(...remote.unverified);
          remoteCleaned = remote.cleaned.length;
          remoteDeleted = remote.deleted.length - remoteCleaned;
    };
    // A store in a database (no SQLite connection: PostgreSQL) goes through its engine and layout alone, under the
    // engine's maintenance lock (an advisory lock every host's erase and prune take).
    if (store.engine === 'postgres') {
      const engine = await engineFor(store.config);
      const onEngine = () => eraseOnEngine(store, { stateDb, key }, sel, dryRun, opts, copies, sweepRedis);
      if (dryRun) ({ erased, vacuumed, walTruncated, statePlaces, stateWalTruncated, bytes, redis } = await onEngine());
      else {
        const lock = await engine.lock(store, 'erase');
        try {
          ({ erased, vacuumed, walTruncated, statePlaces, stateWalTruncated, bytes, redis } = await onEngine());
        } finally {
          await lock.release();
        }
      }
    } else {
      const sqlite = store;
      const run = async () => {
        // A layout that scrubs its own files needs no SQLite thread, and must not get one: its files are libsql's.
        const worker = dryRun ? undefined : layoutOf(sqlite).scrubsOwnFiles ? idleWorker() : startStoreWorker(sqlite.path, busyTimeoutMs(sqlite.db));
        try {
          ({ erased, vacuumed, walTruncated, statePlaces, stateWalTruncated, redis } = await eraseStoreAndRecords(sqlite, { stateDb, key }, sel, dryRun, opts, worker, copies, sweepRedis));
          // Its vectors in a database (mem0's pgvector tables): what the layout read back from their files.
          bytes = erased.bytes;
        } finally {
          await worker?.close();
        }
      };
      if (dryRun) await run();
      else await withMaintenanceLock(sqlite.path, 'erase', run);
    }
  } finally {
    releaseYoung();
    await store.close();
  }

  const selector = describeSelector(key, sel);
  if (redis) {
    found.push(...redis.found);
    deleted.push(...redis.deleted);
    unverified.push(...redis.unverified);
  }
  const receipt: EraseReceipt = {
    id: null,
    store: storeName,
    layout: store.config.layout,
    selector: selector.kind,
    selectorSha256: selector.digest,
    erasedAt: toCanonical(opts.now()),
    dryRun,
    memories: erased.ids.length,
    idsSha256: idsMac(key, erased.ids),
    keyId: eraseKeyId(key),
    counts: bytes ? { ...erased.counts, ...byteCounts(bytes) } : erased.counts,
    vacuumed,
    walTruncated,
    snapshots: { found, deleted, unverified },
    places: [
      ...Object.entries(erased.counts).map(([k, count]) => ({ place: `store:${k}`, count })),
      ...statePlaces,
      { place: 'files:restore staging copies', count: fileCounts.staging },
      { place: 'files:snapshot partial folders', count: fileCounts.partial + fileCounts.retired },
      { place: 'files:restore download folders', count: fileCounts.fetch },
      { place: 'files:snapshot folders', count: localDeleted },
      { place: 'targets:remote snapshots', count: remoteDeleted },
      { place: 'targets:leftovers of interrupted runs', count: remoteCleaned },
      ...(redis?.places ?? []),
    ],
    stateWalTruncated,
    ...(redis ? { redis: { searched: redis.searched, notUsed: redis.notUsed, queued: redis.queued, ...(redis.reason ? { reason: redis.reason } : {}) } } : {}),
    ...(bytes ? { bytes } : {}),
    unreached: erased.unreached ?? [],
  };
  if (!dryRun && opts.record !== false) receipt.id = recordReceipt(expandHome(config.stateDb), receipt);
  log.info({ store: storeName, memories: receipt.memories, dryRun, snapshots: found.length, walTruncated }, 'erase done');
  return receipt;
}

/**
 * The store's erase with memory-warden's records of it (the state db), on connections with secure_delete on, each
 * compacted after. The records go first: after a crash between the two the store still has the memories, so a
 * second erase finds them (and through them these records) again; the other way round it would find nothing.
 *
 * What runs beside what (on two cores): quick_check on the worker while the layout plans (both only read; nothing
 * is changed before the check has passed); the store's VACUUM and checkpoint on the worker while this thread
 * scrubs the state db and looks for copies (`copies`: leftovers, snapshots, targets), which need only the texts.
 */
async function eraseStoreAndRecords(
  store: StoreHandle, { stateDb, key }: { stateDb: string; key: Buffer }, sel: EraseSelector, dryRun: boolean, opts: EraseOptions, worker: StoreWorker | undefined,
  copies: (texts: Strings, ids: Strings, earlier: string[]) => Promise<void>,
  sweepRedis: (state: Db, t: StateTarget, dryRun: boolean) => Promise<RedisSweep>,
) {
  const state = openStateDb(stateDb);
  // The state db's pages through SQLite's default 2 MB of cache, not better-sqlite3's 16 MB: the id hashes an erase
  // records (100,000 at 1% of a 10M-row store) filled it, so the erase held more the more memories it took.
  state.pragma(`cache_size = -${STATE_CACHE_KB}`);
  try {
    const { layoutOpts, selector, earlier, earlierIds } = erasedBefore(state, key, store.name, sel, opts);
    if (dryRun || !worker) {
      const erased = await layoutOf(store).erase(store, { ...layoutOpts, selector: sel, dryRun: true });
      const statePlaces = scrubState(state, stateTarget(store.name, erased, sel, earlierIds), true);
      const redis = await sweepRedis(state, stateTarget(store.name, erased, sel, earlierIds), true);
      await copies(erased.texts, erased.ids, earlier);
      return { erased, vacuumed: false, walTruncated: false, statePlaces, stateWalTruncated: false, redis };
    }
    // A layout that scrubs its own files (scrubsOwnFiles) checks them itself: plain SQLite misreads their indexes.
    const own = layoutOf(store).scrubsOwnFiles === true;
    const intact = own ? Promise.resolve(['ok']) : worker.quickCheck(); // VACUUM fails on a damaged file after the rows went
    // The plan's texts are dropped once its records are scrubbed (a function of its own, so that nothing keeps them):
    // the deletes capture the texts again, and an erase of many memories would hold both.
    const plan = async () => {
      const planned = await layoutOf(store).erase(store, { ...layoutOpts, selector: sel, dryRun: true, plan: true });
      // Hashed while the check still runs (CPU only; recorded once it has passed).
      const plannedMacs = idMacsOf(key, planned.ids);
      const lines = await intact;
      if (lines) assertIntactLines(lines, store.path, 'quick_check');
      else assertIntact(store.db, store.path);
      state.pragma('secure_delete = ON');
      const places = scrubState(state, stateTarget(store.name, planned, sel, earlierIds), false);
      // Kept before the rows go: after a crash past the deletes, the next run still knows which ids to look for, and
      // every restore keeps them (and the person of --user) out (restore-ledger.ts).
      recordErasedSelector(state, key, store.name, selector, sel);
      recordErasedIdMacs(state, store.name, selector, plannedMacs);
      // Redis too, before the rows go: after a kill past the deletes nothing would find these texts again.
      const swept = await sweepRedis(state, stateTarget(store.name, planned, sel, earlierIds), false);
      // Only the ids are kept (as the layout holds them), to tell the rows the agent added since.
      return { places, swept, wasPlanned: memberOf(planned.ids) };
    };
    const planning: { places: Place[]; swept: RedisSweep; wasPlanned?: (id: string) => boolean } = await plan();
    let statePlaces = planning.places;
    let redis = planning.swept;
    // The deletes' frames stay in the WAL until the VACUUM's checkpoint(TRUNCATE): checkpointing them first would
    // copy into the file pages the VACUUM rewrites right after (at 1M rows, 22,000 pages and a second per erase).
    // Once another connection commits too (the agent), each delete's commit gets a PASSIVE checkpoint on the worker,
    // as prune does, so that the agent's own commits do not stop to run it. Not syncing each commit is safe: nothing
    // is reported erased before that last checkpoint has synced the WAL and the file. (A store in rollback-journal
    // mode, mem0's SDK files, keeps its settings: there NORMAL could cost the file, not only the last commits.)
    store.db.pragma('secure_delete = ON');
    if (journalMode(store.db) === 'wal') {
      store.db.pragma('wal_autocheckpoint = 0');
      store.db.pragma('synchronous = NORMAL');
    }
    const dataVersion = () => store.db.pragma('data_version', { simple: true });
    const alone = dataVersion();
    let shared = false;
    const afterCommit = () => {
      pollYoungGeneration();
      shared ||= dataVersion() !== alone;
      if (shared) worker.checkpoint();
    };
    const erased = await layoutOf(store).erase(store, { ...layoutOpts, selector: sel, dryRun, afterCommit });
    const compaction = own ? Promise.resolve({ vacuumed: false, walTruncated: erased.walTruncated ?? false }) : worker.compact(); // queued behind the checkpoints
    // Meanwhile, on this thread: the state db, then the copies outside the store.
    const added = notIn(erased.ids, planning.wasPlanned!); // rows the agent added since the plan
    delete planning.wasPlanned; // the plan's ids: not held while the state db and the copies are searched
    recordErasedIdMacs(state, store.name, selector, idMacsOf(key, added));
    statePlaces = mergePlaces(statePlaces, scrubState(state, stateTarget(store.name, erased, sel, earlierIds), false));
    // Rows the agent added since the plan: their texts searched for in Redis too.
    if (added.length > 0) redis = mergeSweeps(redis, await sweepRedis(state, stateTarget(store.name, erased, sel, earlierIds), false));
    const stateWalTruncated = compactState(state).walTruncated;
    await copies(erased.texts, erased.ids, earlier);
    const { vacuumed, walTruncated } = (await compaction) ?? (await (await engineFor(store.config)).scrubErased(store, { tables: [], needles: [] }));
    if (erased.bytes) noteEarlierErases(erased.bytes, erased, earlier); // its vectors' tables in a database (mem0's pgvector)
    return { erased, vacuumed, walTruncated, statePlaces, stateWalTruncated, redis };
  } finally {
    state.close();
  }
}

/**
 * What memory-warden knows of this person before the erase: the memories its prune deleted for them (`--user`), the
 * selector's keyed hash, and the ids earlier erases of it took (searched for again in the snapshots, though the rows
 * are gone).
 */
function erasedBefore(state: Db, key: Buffer, store: string, sel: EraseSelector, opts: EraseOptions) {
  const layoutOpts: EraseOptions = { ...opts, deletedIds: 'user' in sel ? deletedFor(state, key, store, sel.user) : [] };
  const selector = selectorMac(key, sel);
  const earlier = earlierIdMacs(state, store, selector);
  return { layoutOpts, selector, earlier, earlierIds: { key, macs: new Set(earlier) } };
}

/** The ids of `ids` that `known` does not hold, in order. */
function notIn(ids: Strings, known: (id: string) => boolean): string[] {
  const out: string[] = [];
  for (const id of ids) if (!known(id)) out.push(id);
  return out;
}

/** The erased ids with those `--ids` named that the store no longer had (the snapshots may), each once. */
function withNamed(ids: Strings, named: readonly string[]): Strings {
  const had = memberOf(ids);
  const more = [...new Set(named.filter((id) => !had(id)))];
  if (more.length === 0) return ids;
  const out = StringList.from(ids);
  for (const id of more) out.push(id);
  return out;
}

/** What the state db is scrubbed of: the erased ids, texts, and the other fields (subject, source) of those rows. */
function stateTarget(store: string, e: Erased, sel: EraseSelector, earlier: { key: Buffer; macs: ReadonlySet<string> }) {
  const subject = 'subject' in sel ? sel.subject : undefined;
  const user = 'user' in sel ? sel.user : undefined;
  return { store, ids: e.ids, texts: e.texts, fields: e.fields, subject, user, earlier };
}

/** Two sweeps of Redis in one erase: what the later one found still there is what remains. */
function mergeSweeps(a: RedisSweep, b: RedisSweep): RedisSweep {
  return {
    searched: a.searched && b.searched, notUsed: a.notUsed && b.notUsed, reason: b.reason ?? a.reason,
    found: [...new Set([...a.found, ...b.found])], deleted: [...new Set([...a.deleted, ...b.deleted])],
    unverified: b.unverified, queued: b.queued, places: mergePlaces(a.places, b.places),
  };
}

function mergePlaces(a: Place[], b: Place[]): Place[] {
  const out = a.map((p) => ({ ...p }));
  for (const p of b) {
    const same = out.find((x) => x.place === p.place);
    if (same) same.count += p.count;
    else out.push({ ...p });
  }
  return out;
}

/**
 * A read-back that looked for nothing this run (the selector's rows went in earlier erases): it says so rather than
 * let "none found" stand for the rows whose texts are no longer known.
 */
function noteEarlierErases(bytes: ByteCheck, erased: Erased, earlier: readonly string[]): void {
  if (erased.ids.length > 0 || earlier.length === 0) return;
  bytes.unseen.push({ what: 'earlier-erases', facts: { ids: earlier.length },
    reach: 'earlier erases of this selector deleted rows whose texts are no longer known, so they were not looked for; the VACUUM FULL above rewrote the tables, which leaves no deleted row in them' });
}

/**
 * Two read-backs as one, the store's (`a`) and that of its vectors' tables on another server (`b`): found if either
 * found, unverified if either could not read, every count added; what each cannot see named with its server.
 */
function mergeByteChecks(a: ByteCheck, b: ByteCheck): ByteCheck {
  const verdict = a.verdict === 'found' || b.verdict === 'found' ? 'found' : a.verdict === 'unverified' || b.verdict === 'unverified' ? 'unverified' : 'clean';
  const on = (server: string) => (u: ByteCheck['unseen'][number]) => ({ ...u, facts: { server, ...u.facts } });
  return {
    verdict, needles: Math.max(a.needles, b.needles), relations: a.relations + b.relations, bytes: a.bytes + b.bytes,
    found: [...a.found, ...b.found], shared: a.shared + b.shared,
    unseen: [...a.unseen.map(on('the store\'s')), ...b.unseen.map(on('the vectors\''))],
  };
}

/** The byte check's outcome as the receipt's counts (what the state db keeps): what was found, and what went unread. */
function byteCounts(b: ByteCheck): Record<string, number> {
  return { bytesLeft: b.found.length, bytesUnverified: b.verdict === 'unverified' ? 1 : 0 };
}

/**
 * The erase of a store in a database (PostgreSQL), through its layout and engine only, with memory-warden's records
 * of it as on SQLite: the records first (after a crash between the two the store still has the memories, so the next
 * erase finds them, and through them these records, again), the ledger written before the deletes, then the deletes
 * (the layout's short transactions), then the engine's scrub (VACUUM FULL of the tables, then their files read back
 * for every erased text, field and id no remaining row holds) while this thread compacts the state db and looks for
 * copies. A real erase always scrubs, even when it deleted nothing: an earlier erase killed before its VACUUM left
 * the rows' bytes in the files.
 */
async function eraseOnEngine(
  store: PostgresStoreHandle, { stateDb, key }: { stateDb: string; key: Buffer }, sel: EraseSelector, dryRun: boolean, opts: EraseOptions,
  copies: (texts: Strings, ids: Strings, earlier: string[]) => Promise<void>,
  sweepRedis: (state: Db, t: StateTarget, dryRun: boolean) => Promise<RedisSweep>,
) {
  const [jobs, engine] = await Promise.all([jobsOf(store), engineFor(store.config)]);
  const state = openStateDb(stateDb);
  try {
    const { layoutOpts, selector, earlier, earlierIds } = erasedBefore(state, key, store.name, sel, opts);
    const planned = await jobs.erase(store, { ...layoutOpts, selector: sel, dryRun: true, plan: !dryRun });
    if (dryRun) {
      const statePlaces = scrubState(state, stateTarget(store.name, planned, sel, earlierIds), true);
      const redis = await sweepRedis(state, stateTarget(store.name, planned, sel, earlierIds), true);
      await copies(planned.texts, planned.ids, earlier);
      return { erased: planned, vacuumed: false, walTruncated: false, statePlaces, stateWalTruncated: false, bytes: undefined, redis };
    }
    const plannedMacs = idMacsOf(key, planned.ids);
    state.pragma('secure_delete = ON');
    let statePlaces = scrubState(state, stateTarget(store.name, planned, sel, earlierIds), false);
    recordErasedSelector(state, key, store.name, selector, sel);
    recordErasedIdMacs(state, store.name, selector, plannedMacs);
    // Redis too, before the rows go: after a kill past the deletes nothing would find these texts again.
    let redis = await sweepRedis(state, stateTarget(store.name, planned, sel, earlierIds), false);
    const erased = await jobs.erase(store, { ...layoutOpts, selector: sel, dryRun, planned });
    const added = notIn(erased.ids, memberOf(planned.ids));
    // Shorter than four bytes, a needle matches bytes of any page: not looked for (docs/postgres.md says so).
    const needles = new Set<string>();
    for (const list of [erased.texts, erased.fields?.onlyTheirs() ?? [], erased.ids]) {
      for (const n of list) if (n.length >= 4 || Buffer.byteLength(n) >= 4) needles.add(n); // four UTF-16 units are four bytes or more
    }
    // The records below are written on this thread while the server rewrites the tables: they wait until it has been
    // asked to (else the rewrite's request waits for them).
    let rewriting!: () => void;
    const asked = new Promise<void>((resolve) => (rewriting = resolve));
    const scrubbing = engine.scrubErased(store, { tables: erased.tables ?? [], needles: [...needles], rewriting });
    scrubbing.catch(() => {}); // awaited below; not an unhandled rejection while the copies are searched
    await Promise.race([asked, scrubbing.then(() => undefined, () => undefined)]);
    recordErasedIdMacs(state, store.name, selector, idMacsOf(key, added));
    statePlaces = mergePlaces(statePlaces, scrubState(state, stateTarget(store.name, erased, sel, earlierIds), false));
    if (added.length > 0) redis = mergeSweeps(redis, await sweepRedis(state, stateTarget(store.name, erased, sel, earlierIds), false));
    const stateWalTruncated = compactState(state).walTruncated;
    await copies(erased.texts, erased.ids, earlier);
    const scrubbed = await scrubbing;
    const { vacuumed, walTruncated } = scrubbed;
    // Tables of the store in another database (Mastra's PgVector elsewhere): what the layout read back there.
    const bytes = erased.bytes && scrubbed.bytes ? mergeByteChecks(scrubbed.bytes, erased.bytes) : scrubbed.bytes ?? erased.bytes;
    if (bytes) noteEarlierErases(bytes, erased, earlier);
    return { erased, vacuumed, walTruncated, statePlaces, stateWalTruncated, bytes, redis };
  } finally {
    state.close();
  }
}
