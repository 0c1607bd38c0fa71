import type { StoreHandle } from '../contract.js';
import type { Logger } from '../../log/logger.js';
import { silentLogger } from '../../log/logger.js';
import { configError, storeError } from '../../core/errors.js';
import { parseInstant, toCanonical, DAY_MS, type Instant } from '../../time/instants.js';
import { withMaintenanceLock } from '../../store/lock.js';
import { mem0CollectionConflict, mem0Schema, type Mem0Config } from './config.js';
import { collectionOf, entityCollectionOf, entityVectorDbOf } from './names.js';
import { detectDialect, insertDeleteRow, type HistoryDialect } from './history.js';
import { scrollAll, type Mem0Point, type PointStore } from '../../vectors/contract.js';
import { VECTOR_STORES } from '../../vectors/registry.js';
import { expandHome } from '../../config/read.js';
import { mem0Pgvector, type Mem0Pgvector } from './pgvector.js';
import type { Progress } from '../../progress/progress.js';

/**
 * The mem0 layout: a mem0 deployment (a history file + a memory and an entity collection, in Qdrant or in the
 * TypeScript SDK's own SQLite files) maintained the way mem0 itself would change it, so mem0 and its users see
 * ordinary deletes and updates (docs/mem0-layout.md).
 * Jobs call these functions when a store says `layout: mem0`; nothing here is reached for the warden layout.
 */
export interface Mem0Handle {
  store: StoreHandle;
  cfg: Mem0Config;
  dialect: HistoryDialect;
  points: PointStore;
  collection: string;
  entityCollection: string;
  /** Vectors in PostgreSQL (mem0's pgvector provider): VACUUM FULL of the collections' tables and their bytes read back. */
  scrub?: Mem0Pgvector['scrub'];
  /**
   * Entity links removed from each entity as it is when they go, not from an earlier read: by the server in
   * PostgreSQL (pgvector.ts), in one transaction of the entity file with the SDK's SQLite files. Absent on Qdrant.
   */
  unlink?: Mem0Pgvector['unlink'];
}

export interface Mem0Options {
  /** Defaults to a Qdrant client built from the store's `qdrant` config. */
  points?: PointStore;
}

export function mem0Handle(store: StoreHandle, opts: Mem0Options = {}): Mem0Handle {
  if (store.config.layout !== 'mem0') throw storeError(`${store.name}: layout is ${store.config.layout}, not mem0`);
  const cfg = mem0Schema.parse(store.config.mem0 ?? {});
  const dialect = detectDialect(store.db, store.path, cfg.historyTable);
  const conflict = mem0CollectionConflict({ ...store.config, mem0: cfg }, [collectionOf(cfg, dialect.table)]);
  if (conflict) throw configError(`config: stores.${store.name}.${conflict.path.join('.')}: ${conflict.message} (the history file ${store.path} is the ${dialect.table === 'history' ? 'Python' : 'TypeScript'} SDK's)`);
  const collection = collectionOf(cfg, dialect.table);
  const entityCollection = entityCollectionOf(cfg, dialect.table);
  if (cfg.vectorStore === 'pgvector') {
    const pgv = mem0Pgvector(store, cfg, [collection, entityCollection]);
    return { store, cfg, dialect, points: opts.points ?? pgv.points, collection, entityCollection, scrub: pgv.scrub, ...(opts.points ? {} : { unlink: pgv.unlink }) };
  }
  if (cfg.vectorStore === 'sqlite' && !opts.points) {
    const files = VECTOR_STORES.sqlite({ files: { [collection]: expandHome(cfg.vectorDb), [entityCollection]: expandHome(entityVectorDbOf(cfg)) } });
    // The links removed in one transaction of the entity file (mem0-sqlite's removeFromLists).
    const unlink: Mem0Pgvector['unlink'] = async (table, ids, skip) => {
      const r = await files.removeFromLists(table, LINKED_IDS_KEYS, ids, skip);
      return { linksRemoved: r.removed, entitiesDeleted: r.deleted };
    };
    return { store, cfg, dialect, points: files, collection, entityCollection, unlink };
  }
  const points = opts.points ?? mem0PointStore(store);
  return { store, cfg, dialect, points, collection, entityCollection };
}

/** The vector side the config names when it is neither pgvector nor the TypeScript SDK's own SQLite files: Qdrant. */
function mem0PointStore(store: StoreHandle): PointStore {
  if (!store.config.qdrant) throw storeError(`${store.name}: a mem0 store needs qdrant.url in its config, or mem0.vectorStore: sqlite for the TypeScript SDK's own vector store`);
  return VECTOR_STORES.qdrant({ qdrant: store.config.qdrant, open: store.vectors });
}

// ---- payload, in Python mem0's snake_case or the TypeScript port's camelCase ----

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
export const textOf = (p: Mem0Point): string | null => str(p.payload.data);
export const createdAtOf = (p: Mem0Point): string | null => str(p.payload.created_at) ?? str(p.payload.createdAt);
export const updatedAtOf = (p: Mem0Point): string | null => str(p.payload.updated_at) ?? str(p.payload.updatedAt);
export const userIdOf = (p: Mem0Point): string | null => str(p.payload.user_id) ?? str(p.payload.userId);
export const agentIdOf = (p: Mem0Point): string | null => str(p.payload.agent_id) ?? str(p.payload.agentId);
export const runIdOf = (p: Mem0Point): string | null => str(p.payload.run_id) ?? str(p.payload.runId);
export const expirationOf = (p: Mem0Point): unknown => p.payload.expiration_date ?? p.payload.expirationDate;
/** An entity's links: `linked_memory_ids` (Python) or `linkedMemoryIds` (TypeScript). */
export const LINKED_IDS_KEYS = ['linked_memory_ids', 'linkedMemoryIds'] as const;
export function linkedIdsOf(e: Mem0Point): string[] {
  const v = e.payload.linked_memory_ids ?? e.payload.linkedMemoryIds;
  return Array.isArray(v) ? v.map(String) : [];
}
/** The payload patch that sets an entity's links under the key it already uses (the SDK reads only its own). */
export function linkedIdsPatch(e: Mem0Point, ids: string[]): Record<string, unknown> {
  return 'linkedMemoryIds' in e.payload && !('linked_memory_ids' in e.payload) ? { linkedMemoryIds: ids } : { linked_memory_ids: ids };
}
const isCamel = (p: Mem0Point) => !('updated_at' in p.payload || 'created_at' in p.payload) && ('createdAt' in p.payload || 'updatedAt' in p.payload);

/** Who a memory is about, as mem0 scopes it. */
export function subjectOf(p: Mem0Point): string {
  const u = userIdOf(p), a = agentIdOf(p), r = runIdOf(p);
  return u ? `user:${u}` : a ? `agent:${a}` : r ? `run:${r}` : '';
}

/** Where it came from, as far as mem0 records it (`actor_id`, `role`; absent on the extractor's batch path). */
export function sourceOf(actorId: unknown, role: unknown): string {
  return [typeof role === 'string' && role ? `role:${role}` : '', typeof actorId === 'string' && actorId ? `actor:${actorId}` : ''].filter(Boolean).join(' ');
}

/** What Python's `datetime.now(timezone.utc).isoformat()` writes: microseconds only when non-zero, `+00:00`. */
export function pyIsoUtc(t: Instant): string {
  const iso = new Date(t).toISOString();
  const ms = iso.slice(20, 23);
  return `${iso.slice(0, 19)}${ms === '000' ? '' : `.${ms}000`}+00:00`;
}

/** mem0's `_normalize_iso_timestamp_to_utc`: zoned times become UTC, naive or unparseable ones stay as they are. */
export function normaliseToUtc(value: string | null): string | null {
  if (!value || !/(Z|z|[+-]\d{2}:?\d{2})$/.test(value.trim())) return value;
  const t = parseInstant(value);
  return t === null ? value : pyIsoUtc(t);
}

// ---- expiry, by mem0's documented rule ----

const DATE_ONLY = /^(\d{4})-(\d{2})-(\d{2})$/;

/**
 * The instant a memory stops being visible: mem0's `expiration_date` is a `YYYY-MM-DD` date in UTC, inclusive, so
 * the memory goes at 00:00 UTC of the next day. Anything else is not a date to mem0, and fails open (null).
 */
export function mem0ExpiryInstant(value: unknown): Instant | null {
  if (typeof value !== 'string') return null;
  const m = DATE_ONLY.exec(value.trim());
  if (!m) return null;
  const day = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
  if (new Date(day).toISOString().slice(0, 10) !== value.trim()) return null; // 2026-02-30 and the like
  return day + DAY_MS;
}

export function isMem0Expired(p: Mem0Point, now: Instant): boolean {
  const t = mem0ExpiryInstant(expirationOf(p));
  return t !== null && t <= now;
}

/** Set but not a date mem0 can read: it never expires, and a person should know. */
export function hasBadExpiration(p: Mem0Point): boolean {
  const v = expirationOf(p);
  return v !== undefined && v !== null && v !== '' && mem0ExpiryInstant(v) === null;
}

// ---- prune ----

export interface Mem0PruneResult {
  store: string;
  now: string;
  dryRun: boolean;
  deleted: number;
  /** Same meaning as the warden layout's result, so the prune job and its printer need no branch. */
  expired: number;
  superseded: 0;
  cascaded: 0;
  batches: number;
  ids: string[];
  idsTruncated: boolean;
  durationMs: number;
  historyRows: number;
  entityLinksRemoved: number;
  entitiesDeleted: number;
  /** As PruneResult's: the dangling entity links removed and the entities they were the last links of. */
  leftovers?: Record<string, number>;
}

export interface Mem0JobContext {
  now: () => Instant;
  log?: Logger;
  signal?: AbortSignal;
  /** Memories done of the expired ones, on a terminal (src/progress/progress.ts). */
  progress?: Progress;
}

const ID_CAP = 1000;

/** Ids of expired memories, reading only the expiry keys of each page. */
export async function expiredMemoryIds(h: Mem0Handle, now: Instant): Promise<string[]> {
  const out: string[] = [];
  for await (const page of scrollAll(h.points, h.collection, h.cfg.pageSize, ['expiration_date', 'expirationDate'])) {
    for (const p of page) if (isMem0Expired(p, now)) out.push(p.id);
  }
  return out;
}

/**
 * Delete every memory whose `expiration_date` has passed, exactly as mem0's `delete()` does: the point (wait),
 * then a DELETE row in history carrying the old text, then the memory's id out of every entity's
 * `linked_memory_ids` / `linkedMemoryIds` (an entity left with no link is deleted). Each batch is re-read just
 * before it goes, so a memory whose expiry the agent cleared meanwhile stays.
 */
export interface Mem0PruneOptions extends Mem0Options {
  dryRun?: boolean;
  /** Told each batch (memory id, user) before it is deleted: erase's ledger (src/erase/ledger.ts). */
  beforeDelete?: (memories: { id: string; user: string | null }[], at: Instant) => void;
}

export async function mem0Prune(store: StoreHandle, ctx: Mem0JobContext, opts: Mem0PruneOptions = {}): Promise<Mem0PruneResult> {
  const started = Date.now();
  const log = ctx.log ?? silentLogger;
  const now = ctx.now();
  const h = mem0Handle(store, opts);
  const result: Mem0PruneResult = {
    store: store.name, now: toCanonical(now), dryRun: opts.dryRun ?? false, deleted: 0, expired: 0, superseded: 0, cascaded: 0,
    batches: 0, ids: [], idsTruncated: false, durationMs: 0, historyRows: 0, entityLinksRemoved: 0, entitiesDeleted: 0,
  };
  const candidates = await expiredMemoryIds(h, now);
  const tally = (ids: string[]) => {
    result.deleted += ids.length;
    result.expired += ids.length;
    for (const id of ids) {
      if (result.ids.length < ID_CAP) result.ids.push(id);
      else result.idsTruncated = true;
    }
  };
  // The expired memories' entity links, removed (or, in a dry run, counted as the removal would go) once they are gone.
  const unlinkGone = async (gone: ReadonlySet<string>) => {
    const links = gone.size === 0 ? { linksRemoved: 0, entitiesDeleted: 0 } : result.dryRun ? await planUnlinkEntities(h, gone) : await unlinkEntities(h, gone);
    result.entityLinksRemoved = links.linksRemoved;
    result.entitiesDeleted = links.entitiesDeleted;
  };
  if (result.dryRun) {
    tally(candidates);
    result.historyRows = candidates.length;
    const gone = new Set(candidates);
    await unlinkGone(gone);
    result.leftovers = await removeDanglingLinks(h, true, now, undefined, { gone, entitiesDeleted: result.entitiesDeleted });
  } else {
    await withMaintenanceLock(store.path, 'prune', async () => {
      const gone: string[] = [];
      try {
        if (candidates.length > 0) ctx.progress?.start('prune', candidates.length, 'rows');
        for (let i = 0; i < candidates.length; i += h.cfg.pageSize) {
          if (ctx.signal?.aborted) {
            log.warn({ store: store.name, done: result.deleted }, 'prune interrupted; the next run finishes it');
            break;
          }
          const batch = (await h.points.retrieve(h.collection, candidates.slice(i, i + h.cfg.pageSize))).filter((p) => isMem0Expired(p, now));
          opts.beforeDelete?.(batch.map((p) => ({ id: p.id, user: userIdOf(p) })), now);
          const ids = await deleteLikeMem0(h, batch, now);
          gone.push(...ids);
          result.historyRows += ids.length;
          result.batches += 1;
          tally(ids);
          ctx.progress?.set(Math.min(i + h.cfg.pageSize, candidates.length));
        }
        if (candidates.length > 0) ctx.progress?.done();
      } catch (err) {
        // The memories already gone still lose their entity links if Qdrant lets us; the failure is what counts.
        await unlinkEntities(h, new Set(gone)).catch(() => undefined);
        throw err;
      }
      await unlinkGone(new Set(gone));
      // Then the links mem0's own deletes (and an interrupted run of this one) left to memories that are gone.
      if (!ctx.signal?.aborted) result.leftovers = await removeDanglingLinks(h, false, now, opts.beforeDelete);
    });
  }
  result.durationMs = Date.now() - started;
  log.info({ store: store.name, deleted: result.deleted, entitiesDeleted: result.entitiesDeleted, dryRun: result.dryRun }, 'mem0 prune done');
  return result;
}

/** Steps 2 and 3 of mem0's `_delete_memory` for a batch: points (waited for), then one DELETE row each. */
export async function deleteLikeMem0(h: Mem0Handle, batch: Mem0Point[], now: Instant): Promise<string[]> {
  if (batch.length === 0) return [];
  await h.points.delete(h.collection, batch.map((p) => p.id));
  const updatedAt = pyIsoUtc(now);
  h.store.db.transaction(() => {
    for (const p of batch) {
      insertDeleteRow(h.store.db, h.dialect, {
        memory_id: p.id,
        old_text: textOf(p) ?? '',
        created_at: normaliseToUtc(createdAtOf(p)),
        updated_at: updatedAt,
        actor_id: str(p.payload.actor_id),
        role: str(p.payload.role),
      });
    }
  }).immediate();
  return batch.map((p) => p.id);
}

/** A dry run's plan of the pruned memories' own unlinking: their ids, and the entities it counted deleted. */
export interface DryUnlink {
  gone: ReadonlySet<string>;
  entitiesDeleted: number;
}

export interface UnlinkResult {
  linksRemoved: number;
  entitiesDeleted: number;
}

/**
 * mem0's `_remove_memory_from_entity_store`: drop these ids from every entity's `linked_memory_ids`; delete an
 * entity left with none, rewrite the others' list (the entity text and so its vector are unchanged, which is
 * why no embedding is needed). A missing entity collection is normal: mem0 creates it lazily.
 */
export async function unlinkEntities(h: Mem0Handle, ids: ReadonlySet<string>, alsoDelete?: (p: Mem0Point) => boolean): Promise<UnlinkResult> {
  const out: UnlinkResult = { linksRemoved: 0, entitiesDeleted: 0 };
  if (!(await h.points.collections()).includes(h.entityCollection)) return out;
  const doomed: string[] = [];
  if (h.unlink) {
    // In PostgreSQL: the entities `alsoDelete` takes found by a read (they go whole), every other one's links
    // rewritten by the server from the row as it is then, so an agent's link made meanwhile is never undone.
    for await (const page of alsoDelete ? scrollAll(h.points, h.entityCollection, h.cfg.pageSize, true) : []) {
      for (const e of page) {
        if (!alsoDelete!(e)) continue;
        doomed.push(e.id);
        out.linksRemoved += linkedIdsOf(e).filter((id) => ids.has(id)).length;
      }
    }
    const done = await h.unlink(h.entityCollection, [...ids], doomed);
    await h.points.delete(h.entityCollection, doomed);
    return { linksRemoved: out.linksRemoved + done.linksRemoved, entitiesDeleted: doomed.length + done.entitiesDeleted };
  }
  for await (const page of scrollAll(h.points, h.entityCollection, h.cfg.pageSize, true)) {
    for (const e of page) {
      const linked = linkedIdsOf(e);
      const remaining = linked.filter((id) => !ids.has(id));
      const removed = linked.length - remaining.length;
      if (alsoDelete?.(e) || (removed > 0 && remaining.length === 0)) {
        doomed.push(e.id);
        out.linksRemoved += removed;
      } else if (removed > 0) {
        // Read again just before the write (Qdrant has no transaction): an agent's link made since the page was read
        // is kept unless it lands in the moment between the two.
        const [now] = await h.points.retrieve(h.entityCollection, [e.id]);
        if (!now) continue;
        const fresh = linkedIdsOf(now);
        const left = fresh.filter((id) => !ids.has(id));
        if (left.length === fresh.length) continue;
        out.linksRemoved += fresh.length - left.length;
        if (left.length === 0) doomed.push(e.id);
        else await h.points.setPayload(h.entityCollection, e.id, linkedIdsPatch(now, left));
      }
    }
  }
  // After the scroll: deleting while paging could make Qdrant skip points.
  await h.points.delete(h.entityCollection, doomed);
  out.entitiesDeleted = doomed.length;
  return out;
}

/**
 * What unlinkEntities would do, read and changed nothing (erase --dry-run): the links it would remove, the entities
 * it would delete (their ids, so that a dry sweep after it does not count them twice), each as the real run's form
 * decides it. Qdrant: the links of `linked_memory_ids` (else `linkedMemoryIds`), an entity emptied so deleted; the
 * SDK's SQLite files: both keys, the same; pgvector: both keys, and an entity whose list of either key is empty then,
 * even one found empty, deleted (pgvector.ts, entityUnlink).
 */
export async function planUnlinkEntities(h: Mem0Handle, ids: ReadonlySet<string>, alsoDelete?: (p: Mem0Point) => boolean): Promise<UnlinkResult & { deleted: Set<string> }> {
  const out = { linksRemoved: 0, entitiesDeleted: 0, deleted: new Set<string>() };
  if (!(await h.points.collections()).includes(h.entityCollection)) return out;
  const onServer = h.unlink !== undefined && h.cfg.vectorStore === 'pgvector';
  for await (const page of scrollAll(h.points, h.entityCollection, h.cfg.pageSize, true)) {
    for (const e of page) {
      if (alsoDelete?.(e)) {
        out.linksRemoved += linkedIdsOf(e).filter((id) => ids.has(id)).length;
        out.deleted.add(e.id);
        continue;
      }
      const lists = h.unlink ? LINKED_IDS_KEYS.map((k) => e.payload[k]).filter(Array.isArray).map((l) => l.map(String)) : [linkedIdsOf(e)];
      let removed = 0, emptied = false;
      for (const list of lists) {
        const left = list.filter((id) => !ids.has(id)).length;
        removed += list.length - left;
        emptied ||= left === 0 && (list.length > 0 || onServer);
      }
      out.linksRemoved += removed;
      if (emptied && (removed > 0 || onServer)) out.deleted.add(e.id);
    }
  }
  out.entitiesDeleted = out.deleted.size;
  return out;
}

/**
 * Entity links to memories that are gone, one page of entities at a time: the links read first, then the memories
 * they name looked up. mem0 writes a memory before it links entities to it (`add`, `update`), so a link seen here
 * names a memory already written: one not found is gone (or was never written: mem0 links even a memory whose
 * insert failed). Ids are UUIDs mem0 never gives again, so a memory found gone stays gone.
 */
export async function* danglingEntityLinks(h: Mem0Handle): AsyncGenerator<{ entity: string; memory: string; user: string | null }> {
  if (!(await h.points.collections()).includes(h.entityCollection)) return;
  for await (const page of scrollAll(h.points, h.entityCollection, h.cfg.pageSize, [...LINKED_IDS_KEYS, 'user_id', 'userId'])) {
    const links = [...new Set(page.flatMap(linkedIdsOf))];
    const present = new Set<string>();
    for (let i = 0; i < links.length; i += h.cfg.pageSize) {
      for (const p of await h.points.retrieve(h.collection, links.slice(i, i + h.cfg.pageSize), false)) present.add(p.id);
    }
    for (const e of page) {
      for (const id of linkedIdsOf(e)) if (!present.has(id)) yield { entity: e.id, memory: id, user: userIdOf(e) };
    }
  }
}

/**
 * What mem0's own deletes leave in the entities (its cleanup skipped, failed, or killed; docs/mem0-layout.md): each
 * link to a memory that is gone dropped from `linked_memory_ids` / `linkedMemoryIds`, and an entity that loses its
 * last link so deleted, as `_removeMemoryFromEntityStore` does for a memory it deletes (an entity that had no link to
 * begin with stays: mem0 leaves it too). The link may be the last thing that says whose the memory's text in history
 * is (a memory whose point went without its cleanup): `beforeDelete` records each with the entity's user first, as
 * prune records the memories it deletes (src/erase/ledger.ts), so `erase --user` still finds that text. `dryRun`:
 * counted, nothing changed.
 */
export async function removeDanglingLinks(h: Mem0Handle, dryRun: boolean, now: Instant, beforeDelete?: Mem0PruneOptions['beforeDelete'], pruned?: DryUnlink): Promise<Record<string, number>> {
  const gone = new Map<string, string | null>();
  let links = 0;
  for await (const l of danglingEntityLinks(h)) {
    if (!gone.get(l.memory)) gone.set(l.memory, l.user);
    links++;
  }
  if (dryRun) {
    // The entities the real run deletes here: those left empty once both the pruned memories' links and these are
    // gone, less those the pruned memories' links alone empty (the real run deletes them before it comes here).
    // In PostgreSQL an entity a killed run left emptied in its grace counts even with no link to remove, as below.
    const left = gone.size === 0 && !h.unlink ? 0 : (await planUnlinkEntities(h, new Set([...(pruned?.gone ?? []), ...gone.keys()]))).entitiesDeleted - (pruned?.entitiesDeleted ?? 0);
    return { mem0_dangling_entity_link: links, mem0_entity_left_without_links: left };
  }
  // In PostgreSQL an entity a killed run left emptied in its grace is looked for even with no link to remove.
  if (gone.size === 0 && !h.unlink) return { mem0_dangling_entity_link: 0, mem0_entity_left_without_links: 0 };
  if (gone.size > 0) beforeDelete?.([...gone].map(([id, user]) => ({ id, user })), now);
  const done = await unlinkEntities(h, new Set(gone.keys()));
  return { mem0_dangling_entity_link: done.linksRemoved, mem0_entity_left_without_links: done.entitiesDeleted };
}

// ---- drift ----

/**
 * Drift's "confirmed": mem0 has no confirmation time, and `updated_at` is the closest thing it reads. A
 * confirmation sets it to now, in the form mem0 writes (Python ISO with +00:00, or the port's toISOString for a
 * camelCase payload), and nothing else: no history row, since mem0 would read an UPDATE row as a text change.
 * False when the memory no longer exists.
 */
export async function mem0Confirm(store: StoreHandle, memoryId: string, now: Instant, opts: Mem0Options = {}): Promise<boolean> {
  const h = mem0Handle(store, opts);
  const [p] = await h.points.retrieve(h.collection, [memoryId]);
  if (!p) return false;
  const patch = isCamel(p) ? { updatedAt: new Date(now).toISOString() } : { updated_at: pyIsoUtc(now) };
  await h.points.setPayload(h.collection, memoryId, patch);
  return true;
}

export interface Mem0ReviewItem {
  id: string;
  subject: string;
  fact: string;
  source: string;
  confirmed_at: string | null;
}

/** Memories whose `updated_at` (else `created_at`) is older than `afterDays`, oldest first, at most `limit`. */
export async function mem0ReviewDue(store: StoreHandle, now: Instant, afterDays: number, limit: number, opts: Mem0Options = {}): Promise<{ due: number; batch: Mem0ReviewItem[] }> {
  const h = mem0Handle(store, opts);
  const cutoff = now - afterDays * DAY_MS;
  const found: { t: Instant; item: Mem0ReviewItem }[] = [];
  let due = 0;
  for await (const page of scrollAll(h.points, h.collection, h.cfg.pageSize, true)) {
    for (const p of page) {
      // A memory with an expiry decays: prune ends it, a person is not asked about it (warden's queue: the same).
      if (mem0ExpiryInstant(expirationOf(p)) !== null) continue;
      const when = updatedAtOf(p) ?? createdAtOf(p);
      const t = parseInstant(when);
      if (t === null || t >= cutoff) continue;
      due += 1;
      found.push({ t, item: { id: p.id, subject: subjectOf(p), fact: textOf(p) ?? '', source: sourceOf(p.payload.actor_id, p.payload.role), confirmed_at: when } });
      found.sort((a, b) => a.t - b.t);
      if (found.length > limit) found.pop();
    }
  }
  return { due, batch: found.map((f) => f.item) };
}
