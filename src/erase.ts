import { createHash } from 'node:crypto';
import type { Config } from './config.js';
import { expandHome } from './config.js';
import type { Logger } from './logger.js';
import { silentLogger } from './logger.js';
import type { Db } from './store/sqlite.js';
import { openStore, type StoreHandle } from './store/open.js';
import { memoryColumns } from './store/schema.js';
import { cascadeClosure, deleteWithCascade } from './store/delete.js';
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
import { mem0Handle, pyIsoUtc, textOf, unlinkEntities, userIdOf, type Mem0Handle } from './layouts/mem0.js';
import { asciiLower, countMessages, deleteMessages, historyTexts, memoryIdsMentioning, scrubHistory } from './layouts/mem0-history.js';
import { qdrantPointStore, scrollAll, type Mem0Point, type PointStore } from './layouts/mem0-points.js';

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
  /** Record the receipt in the state db (default true; never for a dry run). */
  record?: boolean;
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
  const deleted = await deleteWithCascade(store.db, roots, { vectors: store.vectors });
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
  const needles = [...new Set(texts)].filter((t) => t.length >= 4);
  const folded = subject === undefined ? undefined : asciiLower(subject);
  const existing = new Set(await points.collections());
  let n = 0;
  for (const c of new Set(collections)) {
    if (!existing.has(c)) continue;
    const doomed: string[] = [];
    for await (const page of scrollAll(points, c, pageSize, true)) {
      for (const p of page) {
        const values = payloadStrings(p.payload);
        const holds = ids.has(p.id) || values.some((v) => needles.some((t) => v.includes(t)) || (folded !== undefined && asciiLower(v).includes(folded)));
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
  if (typeof v === 'string') out.push(v);
  else if (Array.isArray(v)) v.forEach((x) => payloadStrings(x, out));
  else if (v && typeof v === 'object') Object.values(v).forEach((x) => payloadStrings(x, out));
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
  texts.push(...historyTexts(h.store.db, h.dialect, [...ids]));
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
      if ((e.payload.user_id ?? e.payload.userId) === user && Array.isArray(e.payload.linked_memory_ids)) e.payload.linked_memory_ids.forEach((id) => linked.add(String(id)));
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
  // A lost collection (tmpfs at reboot) is no reason to keep the text history still holds.
  const haveCollection = (await h.points.collections()).includes(h.collection);
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
    'user' in sel ? (e.payload.user_id ?? e.payload.userId) === sel.user : 'subject' in sel ? containsFolded(e, sel.subject) : false;
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
  return { ids: idList, counts, texts };
}
