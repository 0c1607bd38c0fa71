import type { StoreHandle, EraseSelector, Erased, LayoutEraseOptions, Unreached } from '../contract.js';
import { usageError } from '../../core/errors.js';
import { linkedIdsOf, mem0Handle, planUnlinkEntities, pyIsoUtc, textOf, unlinkEntities, userIdOf, type Mem0Handle } from './memories.js';
import { asciiLower } from '../../text/needles.js';
import { countMessages, deleteMessages, historyTexts, memoryIdsMentioning, planScrubHistory, scrubHistory } from './history.js';
import { scrollAll, type Mem0Point } from '../../vectors/contract.js';
import { DEFAULT_COLLECTION } from './names.js';
import { payloadStrings, sweepCollections } from '../erase-sweep.js';

/** The mem0 layout's erase (src/erase/erase.ts runs it): points, entity links, history text and kept conversation. */

function containsFolded(p: Mem0Point, text: string): boolean {
  const t = asciiLower(text);
  return payloadStrings(p.payload).some((v) => asciiLower(v).includes(t));
}

/** The needles of the byte check: each text, its lower-cased copy, each id; shorter than four bytes matches any page. */
function byteNeedles(texts: readonly string[], ids: readonly string[]): string[] {
  return [...new Set([...texts, ...texts.map((t) => t.toLowerCase()), ...ids])].filter((n) => Buffer.byteLength(n) >= 4);
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
  // What memory-warden's prune deleted for this user: the ledger remembers whose it was (src/erase/ledger.ts).
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

export async function eraseMem0(store: StoreHandle, sel: EraseSelector, dryRun: boolean, opts: Omit<LayoutEraseOptions, 'selector' | 'dryRun'>): Promise<Erased> {
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
  // History keeps the text of memories mem0's own delete removed, and names no user: a person's are found by their
  // entities' links and by what memory-warden deleted for them, not otherwise. Those of no one known are said.
  const unreached = 'user' in sel ? await unattributedHistory(h, ids, haveCollection) : [];
  const entityOfSelector = (e: Mem0Point) =>
    'user' in sel ? userIdOf(e) === sel.user : 'subject' in sel ? containsFolded(e, sel.subject) : false;
  // Other collections the store names (the memory collection holds only memories: each has its own owner).
  const collections = [h.entityCollection, ...(store.config.qdrant?.collections ?? [])].filter((c) => c !== h.collection);
  const sweep = (dry?: { gone: ReadonlySet<string> }) =>
    sweepCollections(h.points, collections, ids, texts, 'subject' in sel ? sel.subject : undefined, h.cfg.pageSize, undefined, dry);
  if (dryRun && opts.plan) return { ids: idList, counts, texts, unreached }; // the real run counts its own work
  if (dryRun) {
    // What the real run below would change, counted by reading the same things it changes.
    const links = await planUnlinkEntities(h, ids, entityOfSelector);
    counts.entityLinksRemoved = links.linksRemoved;
    counts.entitiesDeleted = links.entitiesDeleted;
    counts.strayPoints = await sweep({ gone: links.deleted });
    Object.assign(counts, planScrubHistory(store.db, h.dialect, idList));
    return { ids: idList, counts, texts, unreached };
  }

  // Vectors first, as everywhere: a crash after this leaves history that a second erase scrubs.
  await h.points.delete(h.collection, withPoints);
  const links = await unlinkEntities(h, ids, entityOfSelector);
  counts.entityLinksRemoved = links.linksRemoved;
  counts.entitiesDeleted = links.entitiesDeleted;
  counts.strayPoints = await sweep();
  const at = pyIsoUtc(opts.now());
  store.db.transaction(() => {
    const s = scrubHistory(store.db, h.dialect, idList, at);
    counts.historyRowsScrubbed = s.scrubbed;
    counts.deleteRowsAdded = s.deleteRowsAdded;
    counts.messagesDeleted = deleteMessages(store.db, h.dialect, by);
  }).immediate();
  // A vector store in SQLite files of its own (the TypeScript SDK's) keeps deleted payloads in free pages: VACUUM.
  await h.points.compact?.();
  // In PostgreSQL (pgvector): VACUUM FULL of its tables and their files read back, for the texts as the payload
  // holds them, mem0's lower-cased textLemmatized copy, and the ids (entity links hold them as text).
  const scrubbed = h.scrub ? await h.scrub(byteNeedles(texts, idList)) : undefined;
  return { ids: idList, counts, texts, unreached, ...(scrubbed ? { bytes: scrubbed.bytes } : {}) };
}

/**
 * Memories whose text history still holds, whose point is gone and which `taken` does not hold: deleted by mem0
 * itself (or by another tool) for someone this erase cannot name. Counted, not read; an erase by the person's name
 * or email (`--subject`) reaches those that mention it.
 */
async function unattributedHistory(h: Mem0Handle, taken: ReadonlySet<string>, haveCollection: boolean): Promise<Unreached[]> {
  const d = h.dialect;
  const withText = (h.store.db.prepare(`SELECT DISTINCT memory_id AS id FROM ${d.table}
    WHERE coalesce(${d.oldText}, '') <> '' OR coalesce(${d.newText}, '') <> ''`).all() as { id: unknown }[]).map((r) => String(r.id)).filter((id) => !taken.has(id));
  const live = new Set<string>();
  for (let i = 0; haveCollection && i < withText.length; i += h.cfg.pageSize) {
    for (const p of await h.points.retrieve(h.collection, withText.slice(i, i + h.cfg.pageSize), false)) live.add(p.id);
  }
  const gone = withText.filter((id) => !live.has(id)).length;
  if (gone === 0) return [];
  return [{ what: 'history-of-deleted-memories', facts: { memories: gone },
    reach: 'mem0\'s history keeps the text of memories deleted by mem0 itself (or another tool) and names no user, so whose they are cannot be told: erase --subject TEXT (a name, an email) takes those that mention it' }];
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
