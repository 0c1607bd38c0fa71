import { createHash } from 'node:crypto';
import type { Config } from './config.js';
import { expandHome } from './config.js';
import type { Logger } from './logger.js';
import { silentLogger } from './logger.js';
import type { Db } from './store/sqlite.js';
import { openStore, type StoreHandle } from './store/open.js';
import { assertIntact } from './store/sqlite.js';
import { memoryColumns } from './store/schema.js';
import { cascadeClosure, deleteRoots, type DeletedRow } from './store/delete.js';
import { withMaintenanceLock } from './store/lock.js';
import { QdrantStore } from './store/qdrant.js';
import { recordReceipt } from './erase-receipts.js';
import { snapshotCopies } from './erase-snapshots.js';
import { assertNoPendingRestore } from './snapshot/journal.js';
import { compactState, scrubState, type Place } from './erase-state.js';
import { deletedFor } from './erase-ledger.js';
import { leftoverCopies, removeLeftovers } from './erase-leftovers.js';
import { openStateDb } from './state.js';
import { storeSnapshotDir } from './snapshot/layout.js';
import { usageError } from './errors.js';
import { layoutOf } from './layouts/index.js';
import { toCanonical, type Instant } from './time.js';
import type { Progress } from './progress.js';
import { linkedIdsOf, mem0Handle, pyIsoUtc, textOf, unlinkEntities, userIdOf, type Mem0Handle } from './layouts/mem0.js';
import { asciiLower, countMessages, deleteMessages, historyTexts, memoryIdsMentioning, scrubHistory } from './layouts/mem0-history.js';
import { qdrantPointStore, scrollAll, type Mem0Point, type PointStore } from './layouts/mem0-points.js';
import { textFinder } from './needles.js';
import { DEFAULT_COLLECTION } from './layouts/mem0-config.js';

/**
 * Erase (right to erasure): every memory of a person or subject, from every part of a store — rows with their
 * cascade, points in every collection, mem0's history text and kept conversation — on a connection with
 * secure_delete on, then VACUUM and a WAL checkpoint(TRUNCATE), so the text is in no page, free page or WAL frame
 * of the file. memory-warden's own copies go too: its records in the state db (erase-state.ts, then the same
 * VACUUM and checkpoint there) and the staged copies its killed jobs left (erase-leftovers.ts). A receipt says
 * what was erased and where, never what it said. Snapshots still hold the data: erase lists the snapshot folders
 * that contain it and, when asked, deletes them.
 */
export type EraseSelector = { user: string } | { subject: string } | { ids: string[] };

export interface EraseOptions {
  dryRun?: boolean;
  /** Delete the snapshot folders that still contain erased text. */
  snapshots?: boolean;
  now: () => Instant;
  log?: Logger;
  /** Defaults to the store's configured Qdrant. */
  points?: PointStore;
  /**
   * mem0: go on although the memory collection is missing or holds no mem0 point while history says memories
   * exist (the vectors are known to be lost). Without it such an erase refuses: it would find nothing to delete.
   */
  vectorsLost?: boolean;
  /** Record the receipt in the state db (default true; never for a dry run). */
  record?: boolean;
  /** How far the deletes have got, on a terminal (src/progress.ts). */
  progress?: Progress;
  /** Set by erase for --user: memories memory-warden itself deleted for this person (erase-ledger.ts). */
  deletedIds?: readonly string[];
}

export interface EraseReceipt {
  id: number | null;
  store: string;
  layout: 'warden' | 'mem0';
  selector: 'user' | 'subject' | 'ids';
  /** sha256 of `kind:value` (ids sorted, joined by newlines): proves what was asked without keeping it. */
  selectorSha256: string;
  erasedAt: string;
  dryRun: boolean;
  /** Rows (warden) or memories (mem0) erased. */
  memories: number;
  /** sha256 of the erased memory ids, sorted and joined by newlines. */
  idsSha256: string;
  counts: Record<string, number>;
  vacuumed: boolean;
  /** False when a reader kept the WAL from being truncated: old frames may remain until the next checkpoint. */
  walTruncated: boolean;
  snapshots: { found: string[]; deleted: string[] };
  /** Every place erase looked, with how many records or files it erased there (store:…, state:…, files:…). */
  places: Place[];
  /** The state db's WAL truncated after its scrub (false: a reader held it; run erase again). */
  stateWalTruncated: boolean;
}

const MIN_SUBJECT = 3;
const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');

function describeSelector(sel: EraseSelector): { kind: EraseReceipt['selector']; digest: string } {
  if ('user' in sel) return { kind: 'user', digest: sha256(`user:${sel.user}`) };
  if ('subject' in sel) return { kind: 'subject', digest: sha256(`subject:${sel.subject}`) };
  return { kind: 'ids', digest: sha256(`ids:${[...sel.ids].sort().join('\n')}`) };
}

export function validateSelector(sel: EraseSelector): void {
  if ('user' in sel && sel.user.trim() === '') throw usageError('erase --user: an empty id would match nothing');
  if ('subject' in sel && sel.subject.trim().length < MIN_SUBJECT) throw usageError(`erase --subject: at least ${MIN_SUBJECT} characters (a shorter text matches far more than one person)`);
  if ('ids' in sel && sel.ids.length === 0) throw usageError('erase --ids: no ids given');
}

/** What one layout's erase found and did; the texts are kept in memory only, to look for copies in snapshots. */
export interface Erased {
  ids: string[];
  counts: Record<string, number>;
  texts: string[];
}

export async function erase(config: Config, storeName: string, sel: EraseSelector, opts: EraseOptions): Promise<EraseReceipt> {
  validateSelector(sel);
  const log = opts.log ?? silentLogger;
  const dryRun = opts.dryRun ?? false;
  if (!dryRun && config.stores[storeName]) assertNoPendingRestore(config.stores[storeName]!.db);
  // The receipt must be recordable before anything is erased: a state db that cannot be written fails here.
  if (!dryRun && opts.record !== false) openStateDb(expandHome(config.stateDb)).close();
  const store = openStore(config, storeName);
  let erased: Erased = { ids: [], counts: {}, texts: [] };
  let vacuumed = false;
  let walTruncated = false;
  let found: string[] = [];
  let deleted: string[] = [];
  const snapshotRoot = storeSnapshotDir(config, storeName);
  const stateDb = expandHome(config.stateDb);
  const subject = 'subject' in sel ? sel.subject : undefined;
  let statePlaces: Place[] = [];
  let fileCounts = { staged: 0, partials: 0 };
  let stateWalTruncated = !dryRun;
  try {
    // Under the store's maintenance lock, which the snapshot job holds too: no snapshot is half-written meanwhile.
    const run = async () => {
      if (!dryRun) assertIntact(store.db, store.path); // VACUUM fails on a damaged file after the rows went
      ({ erased, vacuumed, walTruncated, statePlaces, stateWalTruncated } = await eraseStoreAndRecords(store, stateDb, sel, dryRun, opts));
      fileCounts = await eraseLeftovers(store, snapshotRoot, erased.texts, subject, dryRun, log);
      ({ found, deleted } = await snapshotCopies(config, storeName, erased.texts, subject, { remove: !dryRun && (opts.snapshots ?? false), locked: !dryRun, log }));
    };
    if (dryRun) await run();
    else await withMaintenanceLock(store.path, 'erase', run);
  } finally {
    store.close();
  }

  const selector = describeSelector(sel);
  const receipt: EraseReceipt = {
    id: null,
    store: storeName,
    layout: store.config.layout,
    selector: selector.kind,
    selectorSha256: selector.digest,
    erasedAt: toCanonical(opts.now()),
    dryRun,
    memories: erased.ids.length,
    idsSha256: sha256([...erased.ids].sort().join('\n')),
    counts: erased.counts,
    vacuumed,
    walTruncated,
    snapshots: { found, deleted },
    places: [
      ...Object.entries(erased.counts).map(([k, count]) => ({ place: `store:${k}`, count })),
      ...statePlaces,
      { place: 'files:restore staging copies', count: fileCounts.staged },
      { place: 'files:snapshot partial folders', count: fileCounts.partials },
      { place: 'files:snapshot folders', count: deleted.length },
    ],
    stateWalTruncated,
  };
  if (!dryRun && opts.record !== false) receipt.id = recordReceipt(expandHome(config.stateDb), receipt);
  log.info({ store: storeName, memories: receipt.memories, dryRun, snapshots: found.length, walTruncated }, 'erase done');
  return receipt;
}

/**
 * The store's erase with memory-warden's records of it (the state db), on connections with secure_delete on, each
 * compacted after. The records go first: after a crash between the two the store still has the memories, so a
 * second erase finds them (and through them these records) again; the other way round it would find nothing.
 */
async function eraseStoreAndRecords(store: StoreHandle, stateDb: string, sel: EraseSelector, dryRun: boolean, opts: EraseOptions) {
  const subject = 'subject' in sel ? sel.subject : undefined;
  const state = openStateDb(stateDb);
  try {
    const layoutOpts: EraseOptions = { ...opts, deletedIds: 'user' in sel ? deletedFor(state, stateDb, store.name, sel.user) : [] };
    let statePlaces: Place[] = [];
    if (!dryRun) {
      state.pragma('secure_delete = ON');
      const planned = await layoutOf(store).erase(store, sel, true, layoutOpts);
      statePlaces = scrubState(state, { store: store.name, ids: planned.ids, texts: planned.texts, subject }, false);
      store.db.pragma('secure_delete = ON');
    }
    const erased = await layoutOf(store).erase(store, sel, dryRun, layoutOpts);
    const { vacuumed, walTruncated } = dryRun ? { vacuumed: false, walTruncated: false } : compact(store.db);
    statePlaces = mergePlaces(statePlaces, scrubState(state, { store: store.name, ids: erased.ids, texts: erased.texts, subject }, dryRun));
    const stateWalTruncated = dryRun ? false : compactState(state).walTruncated;
    return { erased, vacuumed, walTruncated, statePlaces, stateWalTruncated };
  } finally {
    state.close();
  }
}

/** Staged copies killed jobs left (erase-leftovers.ts): counted, and removed unless a dry run. */
async function eraseLeftovers(store: StoreHandle, snapshotRoot: string, texts: string[], subject: string | undefined, dryRun: boolean, log: Logger) {
  const left = await leftoverCopies(store.path, snapshotRoot, texts, subject);
  const q = store.vectors instanceof QdrantStore ? store.vectors : store.config.qdrant ? new QdrantStore(store.config.qdrant) : undefined;
  if (!dryRun) await removeLeftovers(left, snapshotRoot, q, log);
  return { staged: left.staged.length, partials: left.partials.length };
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
 * VACUUM rewrites the file without the free pages secure_delete already zeroed; the checkpoint copies the WAL back
 * and truncates it, so no old frame keeps a copy. A reader holding the WAL makes the truncate fail: reported.
 */
function compact(db: Db): { vacuumed: boolean; walTruncated: boolean } {
  db.exec('VACUUM');
  const wal = String(db.pragma('journal_mode', { simple: true })).toLowerCase() === 'wal';
  if (!wal) return { vacuumed: true, walTruncated: true };
  const [r] = db.pragma('wal_checkpoint(TRUNCATE)') as { busy: number; log: number; checkpointed: number }[];
  return { vacuumed: true, walTruncated: r !== undefined && r.busy === 0 && r.log === 0 };
}

// ---- the warden layout ----

/** Each erase transaction holds the write lock about this long. */
const ERASE_BATCH_MS = 40;

function wardenRoots(db: Db, sel: EraseSelector): string[] {
  const ids = (sql: string, ...args: unknown[]) => (db.prepare(sql).all(...args) as { id: string }[]).map((r) => String(r.id));
  if ('ids' in sel) return ids(`SELECT id FROM memory WHERE id IN (SELECT value FROM json_each(?))`, JSON.stringify(sel.ids));
  if ('user' in sel) {
    // The brief's table has no user column: a per-user store's subject names the person. A user_id column wins.
    return memoryColumns(db).has('user_id') ? ids(`SELECT id FROM memory WHERE user_id = ?`, sel.user) : ids(`SELECT id FROM memory WHERE subject = ?`, sel.user);
  }
  return ids(`SELECT id FROM memory WHERE instr(lower(subject), lower(?)) > 0 OR instr(lower(fact), lower(?)) > 0`, sel.subject, sel.subject);
}

export async function eraseWarden(store: StoreHandle, sel: EraseSelector, dryRun: boolean, opts: EraseOptions): Promise<Erased> {
  const roots = wardenRoots(store.db, sel);
  const closure = cascadeClosure(store.db, roots);
  const ids = closure.map((r) => r.id);
  const texts = ids.length === 0 ? [] : (store.db.prepare(`SELECT fact FROM memory WHERE id IN (SELECT value FROM json_each(?))`).all(JSON.stringify(ids)) as { fact: string }[]).map((r) => r.fact);
  const counts: Record<string, number> = { rows: ids.length, cascaded: ids.length - roots.length, strayPoints: 0 };
  if (dryRun || ids.length === 0) return { ids, counts, texts };
  // Short transactions however many rows the selector names: the agent keeps writing meanwhile.
  const deleted: DeletedRow[] = [];
  opts.progress?.start('erase', roots.length, 'rows');
  for (let i = 0; i < roots.length; ) {
    const step = await deleteRoots(store.db, roots.slice(i), { vectors: store.vectors, budget: { ms: ERASE_BATCH_MS, chunk: 100 } });
    for (const row of step.deleted) deleted.push(row);
    i += step.consumed;
    opts.progress?.set(i);
  }
  opts.progress?.done();
  counts.rows = deleted.length;
  counts.cascaded = deleted.length - roots.length;
  const points = pointsOf(store, opts);
  if (points && store.config.qdrant) {
    // A point that belongs to a row still in the store stays, even if it repeats an erased text word for word.
    const vectors = store.vectors instanceof QdrantStore ? store.vectors : new QdrantStore(store.config.qdrant);
    const exists = store.db.prepare(`SELECT 1 FROM memory WHERE id = ?`);
    const keep = (p: Mem0Point) => vectors.rowIdsOf({ id: p.id, payload: p.payload }).some((id) => exists.get(id) !== undefined);
    counts.strayPoints = await sweepCollections(points, store.config.qdrant.collections, new Set(), texts, 'subject' in sel ? sel.subject : undefined, 256, keep);
  }
  return { ids: deleted.map((r) => r.id), counts, texts };
}

function pointsOf(store: StoreHandle, opts: EraseOptions): PointStore | undefined {
  if (opts.points) return opts.points;
  if (store.vectors instanceof QdrantStore) return qdrantPointStore(store.vectors);
  return store.config.qdrant ? qdrantPointStore(store.config.qdrant) : undefined;
}

/**
 * Points that still carry erased text after the deletes by id — copies written around the store, orphans — in
 * every collection: any payload whose JSON holds one of the texts (or, for --subject, the subject in any case).
 */
async function sweepCollections(
  points: PointStore, collections: readonly string[], ids: ReadonlySet<string>, texts: string[], subject: string | undefined, pageSize: number,
  keep: (p: Mem0Point) => boolean = () => false,
): Promise<number> {
  const holdsText = textFinder([...new Set(texts)]);
  const folded = subject === undefined ? undefined : asciiLower(subject);
  const existing = new Set(await points.collections());
  let n = 0;
  for (const c of new Set(collections)) {
    if (!existing.has(c)) continue;
    const doomed: string[] = [];
    for await (const page of scrollAll(points, c, pageSize, true)) {
      for (const p of page) {
        const values = payloadStrings(p.payload);
        const holds = ids.has(p.id) || values.some((v) => holdsText(v) || (folded !== undefined && asciiLower(v).includes(folded)));
        if (holds && !keep(p)) doomed.push(p.id);
      }
    }
    await points.delete(c, doomed);
    n += doomed.length;
  }
  return n;
}

// ---- the mem0 layout ----

/** Every string value in a payload, nested ones included; never the keys (`--subject user` must not match `user_id`). */
export function payloadStrings(v: unknown, out: string[] = []): string[] {
  // A stack, not recursion: a payload is the agent's data, and can nest deeper than the call stack goes.
  const stack: unknown[] = [v];
  while (stack.length > 0) {
    const x = stack.pop();
    if (typeof x === 'string') out.push(x);
    else if (x && typeof x === 'object') {
      const inner = Array.isArray(x) ? x : Object.values(x);
      for (let i = inner.length - 1; i >= 0; i--) stack.push(inner[i]);
    }
  }
  return out;
}

function containsFolded(p: Mem0Point, text: string): boolean {
  const t = asciiLower(text);
  return payloadStrings(p.payload).some((v) => asciiLower(v).includes(t));
}

async function selectMem0(h: Mem0Handle, sel: EraseSelector, haveCollection: boolean, deletedIds: readonly string[]): Promise<{ ids: Set<string>; texts: string[] }> {
  const ids = new Set<string>();
  const texts: string[] = [];
  const take = (p: Mem0Point) => {
    ids.add(p.id);
    const t = textOf(p);
    if (t) texts.push(t);
  };
  if (haveCollection && 'ids' in sel) {
    for (let i = 0; i < sel.ids.length; i += h.cfg.pageSize) (await h.points.retrieve(h.collection, sel.ids.slice(i, i + h.cfg.pageSize))).forEach(take);
  } else if (haveCollection && !('ids' in sel)) {
    const mine = (p: Mem0Point) => ('user' in sel ? userIdOf(p) === sel.user : containsFolded(p, sel.subject));
    for await (const page of scrollAll(h.points, h.collection, h.cfg.pageSize, true)) page.filter(mine).forEach(take);
  }
  // History remembers memories whose points are gone, but has no user column: text and ids reach them, and for a
  // user the links of the user's own entities (mem0 often leaves links to deleted memories behind).
  if ('subject' in sel) for (const id of memoryIdsMentioning(h.store.db, h.dialect, sel.subject)) ids.add(id);
  if ('ids' in sel) {
    const known = h.store.db.prepare(`SELECT DISTINCT memory_id FROM ${h.dialect.table} WHERE memory_id IN (SELECT value FROM json_each(?))`).all(JSON.stringify(sel.ids)) as { memory_id: string }[];
    for (const r of known) ids.add(String(r.memory_id));
  }
  if ('user' in sel) for (const id of await deletedLinkedFrom(h, sel.user, haveCollection)) ids.add(id);
  // What memory-warden's prune deleted for this user: the ledger remembers whose it was (erase-ledger.ts).
  if ('user' in sel && deletedIds.length > 0) {
    const known = h.store.db.prepare(`SELECT DISTINCT memory_id FROM ${h.dialect.table} WHERE memory_id IN (SELECT value FROM json_each(?))`).all(JSON.stringify(deletedIds)) as { memory_id: string }[];
    for (const r of known) ids.add(String(r.memory_id));
  }
  for (const t of historyTexts(h.store.db, h.dialect, [...ids])) texts.push(t);
  return { ids, texts };
}

/**
 * Memories the user's own entities still link to whose points are gone: mem0 scopes entities by user, so these are
 * the user's deleted memories, whose text history keeps. A link to a live point of someone else is left alone.
 */
async function deletedLinkedFrom(h: Mem0Handle, user: string, haveCollection: boolean): Promise<string[]> {
  if (!(await h.points.collections()).includes(h.entityCollection)) return [];
  const linked = new Set<string>();
  for await (const page of scrollAll(h.points, h.entityCollection, h.cfg.pageSize, true)) {
    for (const e of page) {
      if (userIdOf(e) === user) linkedIdsOf(e).forEach((id) => linked.add(id));
    }
  }
  const out: string[] = [];
  const all = [...linked];
  for (let i = 0; i < all.length; i += h.cfg.pageSize) {
    const chunk = all.slice(i, i + h.cfg.pageSize);
    const live = new Set(haveCollection ? (await h.points.retrieve(h.collection, chunk, false)).map((p) => p.id) : []);
    const inHistory = h.store.db.prepare(`SELECT DISTINCT memory_id FROM ${h.dialect.table} WHERE memory_id IN (SELECT value FROM json_each(?))`).all(JSON.stringify(chunk.filter((id) => !live.has(id)))) as { memory_id: string }[];
    out.push(...inHistory.map((r) => String(r.memory_id)));
  }
  return out;
}

export async function eraseMem0(store: StoreHandle, sel: EraseSelector, dryRun: boolean, opts: EraseOptions): Promise<Erased> {
  const h = mem0Handle(store, opts.points ? { points: opts.points } : {});
  // A lost collection (tmpfs at reboot) is no reason to keep the text history still holds, once a person says so.
  const haveCollection = (await h.points.collections()).includes(h.collection);
  if (!opts.vectorsLost) await assertVectorsFound(h, haveCollection);
  const { ids, texts } = await selectMem0(h, sel, haveCollection, opts.deletedIds ?? []);
  const idList = [...ids];
  const withPoints: string[] = [];
  for (let i = 0; haveCollection && i < idList.length; i += h.cfg.pageSize) {
    withPoints.push(...(await h.points.retrieve(h.collection, idList.slice(i, i + h.cfg.pageSize), false)).map((p) => p.id));
  }
  const by = 'user' in sel ? { userId: sel.user } : 'subject' in sel ? { text: sel.subject } : {};
  const counts: Record<string, number> = {
    points: withPoints.length, historyRowsScrubbed: 0, deleteRowsAdded: 0, entityLinksRemoved: 0, entitiesDeleted: 0, strayPoints: 0,
    messagesDeleted: countMessages(store.db, h.dialect, by),
  };
  if (dryRun) return { ids: idList, counts, texts };

  // Vectors first, as everywhere: a crash after this leaves history that a second erase scrubs.
  await h.points.delete(h.collection, withPoints);
  const entityOfSelector = (e: Mem0Point) =>
    'user' in sel ? userIdOf(e) === sel.user : 'subject' in sel ? containsFolded(e, sel.subject) : false;
  const links = await unlinkEntities(h, ids, entityOfSelector);
  counts.entityLinksRemoved = links.linksRemoved;
  counts.entitiesDeleted = links.entitiesDeleted;
  // Other collections the store names (the memory collection holds only memories: each has its own owner).
  const collections = [h.entityCollection, ...(store.config.qdrant?.collections ?? [])].filter((c) => c !== h.collection);
  counts.strayPoints = await sweepCollections(h.points, collections, ids, texts, 'subject' in sel ? sel.subject : undefined, h.cfg.pageSize);
  const at = pyIsoUtc(opts.now());
  store.db.transaction(() => {
    const s = scrubHistory(store.db, h.dialect, idList, at);
    counts.historyRowsScrubbed = s.scrubbed;
    counts.deleteRowsAdded = s.deleteRowsAdded;
    counts.messagesDeleted = deleteMessages(store.db, h.dialect, by);
  }).immediate();
  // A vector store in SQLite files of its own (the TypeScript SDK's) keeps deleted payloads in free pages: VACUUM.
  await h.points.compact?.();
  return { ids: idList, counts, texts };
}

/**
 * Before anything is deleted: history says memories exist, so the memory collection must exist and hold mem0's
 * points. Otherwise the config names the wrong collection (the other SDK's default, say) and erase would find
 * nothing while every memory stays readable: a usage error, naming a collection that would fit.
 */
async function assertVectorsFound(h: Mem0Handle, haveCollection: boolean): Promise<void> {
  const alive = h.store.db
    .prepare(`SELECT count(*) AS n FROM (SELECT ${h.dialect.event} AS event, max(rowid) FROM ${h.dialect.table} WHERE memory_id IS NOT NULL GROUP BY memory_id) WHERE event IS NOT 'DELETE'`)
    .get() as { n: number };
  if (alive.n === 0) return;
  let holdsMem0 = false;
  if (haveCollection) {
    const first = await h.points.scroll(h.collection, { limit: h.cfg.pageSize, payload: ['data'] });
    holdsMem0 = first.points.some((p) => typeof p.payload.data === 'string');
  }
  if (holdsMem0) return;
  const all = await h.points.collections();
  const fits = all.filter((c) => c !== h.collection && Object.values(DEFAULT_COLLECTION).includes(c as never));
  const why = haveCollection ? `collection "${h.collection}" holds no mem0 memory` : `there is no collection "${h.collection}"`;
  const hint = fits.length > 0 ? `; mem0.collection: ${fits.join(' or ')} exists (each SDK's default)` : '';
  throw usageError(`erase ${h.store.name}: ${why} while ${h.store.path} records ${alive.n} memory(ies): nothing was erased (check mem0.collection${hint}; --vectors-lost if the vectors are really gone)`);
}
