import { createHash } from 'node:crypto';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import type { StoreHandle } from '../contract.js';
import { journalMode } from '../../store/sqlite.js';
import { finding, isProblem, ID_SAMPLE, type Finding } from '../../job/findings.js';
import { toCanonical, type Instant } from '../../time/instants.js';
import type { CheckReport } from '../contract.js';
import { lastEventIndex, type LastEventIndex } from './history.js';
import { DEFAULT_COLLECTION } from './names.js';
import { scrollAll } from '../../vectors/contract.js';
import { danglingEntityLinks, hasBadExpiration, isMem0Expired, mem0Handle, textOf, type Mem0Options } from './memories.js';

export interface Mem0IntegrityOptions extends Mem0Options {
  now: Instant;
  /** Where the mount table is read from; tests point it at a file of their own. */
  mountsFile?: string;
}

/** Ids sampled up to ID_SAMPLE, counted exactly. */
class Tally {
  ids: string[] = [];
  count = 0;
  add(id: string) {
    this.count += 1;
    if (this.ids.length < ID_SAMPLE) this.ids.push(id);
  }
}

/**
 * The mem0 integrity findings, in two streaming passes (one page of points or one chunk of history ids in memory
 * at a time): points against history, then history against points.
 */
export async function mem0Integrity(store: StoreHandle, opts: Mem0IntegrityOptions): Promise<Finding[]> {
  const h = mem0Handle(store, opts);
  const out: Finding[] = [];

  const lines = (store.db.pragma('integrity_check') as { integrity_check: string }[]).map((r) => r.integrity_check);
  if (lines.join('; ') !== 'ok') out.push(finding('mem0_history_integrity', 'error', `history.db PRAGMA integrity_check: ${lines.slice(0, 5).join('; ')}`));

  // The TypeScript SDK's own vector files are vector paths too.
  out.push(...tmpfsFindings([...h.cfg.vectorPaths, ...(h.points.files?.() ?? [])], store.path, opts.mountsFile));

  const collections = await h.points.collections();
  if (!collections.includes(h.collection)) {
    const fits = collections.filter((c) => c !== h.collection && Object.values(DEFAULT_COLLECTION).includes(c as never));
    const hint = fits.length > 0 ? ` (${fits.join(', ')} exists: each SDK's default; check mem0.collection)` : '';
    out.push(finding('mem0_no_collection', 'error', `the vector store has no collection "${h.collection}": every memory in history is without its vector${hint}`));
    return out;
  }

  const index = lastEventIndex(store.db, h.dialect);
  try {
    return [...out, ...(await crossCheck(h, index, opts.now))];
  } finally {
    index.drop();
  }
}

async function crossCheck(h: ReturnType<typeof mem0Handle>, index: LastEventIndex, now: Instant): Promise<Finding[]> {
  const out: Finding[] = [];
  const resurrected = new Tally(), noHistory = new Tally(), hashMismatch = new Tally(), expired = new Tally(), badExpiry = new Tally();
  let points = 0;
  for await (const page of scrollAll(h.points, h.collection, h.cfg.pageSize, true)) {
    points += page.length;
    const last = index.get(page.map((p) => p.id));
    for (const p of page) {
      const event = last.get(p.id);
      if (event === undefined) noHistory.add(p.id);
      else if (event === 'DELETE') resurrected.add(p.id);
      const text = textOf(p);
      const hash = p.payload.hash;
      if (text !== null && typeof hash === 'string' && createHash('md5').update(text, 'utf8').digest('hex') !== hash) hashMismatch.add(p.id);
      if (isMem0Expired(p, now)) expired.add(p.id);
      if (hasBadExpiration(p)) badExpiry.add(p.id);
    }
  }

  const lost = new Tally();
  let chunk: string[] = [];
  const flush = async () => {
    const found = new Set((await h.points.retrieve(h.collection, chunk, false)).map((p) => p.id));
    for (const id of chunk) if (!found.has(id)) lost.add(id);
    chunk = [];
  };
  // The history iterator holds the connection while Qdrant is asked; nothing else uses it meanwhile.
  for (const id of index.alive()) {
    chunk.push(id);
    if (chunk.length >= h.cfg.pageSize) await flush();
  }
  if (chunk.length > 0) await flush();

  const dangling = await danglingLinks(h);

  const add = (t: Tally, code: string, severity: 'error' | 'warning' | 'info', message: string) => {
    if (t.count > 0) out.push(finding(code, severity, message, t.ids, t.count));
  };
  add(resurrected, 'mem0_resurrected', 'error', `${resurrected.count} memory(ies) came back: the point exists but the last history event is DELETE (two stores out of step, or a restore of vectors older than history)`);
  add(lost, 'mem0_lost_vector', 'error', `${lost.count} memory(ies) history says exist have no point in "${h.collection}" (lost vectors: mem0 cannot even delete them)`);
  add(noHistory, 'mem0_no_history', 'warning', `${noHistory.count} point(s) with no history at all (written around mem0, or history.db replaced)`);
  add(hashMismatch, 'mem0_hash_mismatch', 'error', `${hashMismatch.count} point(s) whose hash is not the md5 of their data (text changed outside mem0)`);
  add(dangling, 'mem0_dangling_entity_link', 'warning', `${dangling.count} entity link(s) to memories that no longer exist (mem0 skips entity cleanup when its entity store was not opened): the next prune removes them`);
  add(badExpiry, 'mem0_bad_expiration', 'warning', `${badExpiry.count} point(s) with an expiration_date that is not a YYYY-MM-DD date: mem0 treats them as never expiring`);
  add(expired, 'mem0_expired_pending', 'info', `${expired.count} memory(ies) past their expiration_date: hidden from search by mem0, the next prune deletes them`);
  out.push(finding('mem0_points', 'info', `${points} point(s) in "${h.collection}"`, undefined, points));
  return out;
}

/** Entity links (id in `linked_memory_ids` / `linkedMemoryIds`) to memories with no point, sampled (memories.ts reads them a page at a time). */
async function danglingLinks(h: ReturnType<typeof mem0Handle>): Promise<Tally> {
  const t = new Tally();
  for await (const l of danglingEntityLinks(h)) t.add(`${l.entity}->${l.memory}`);
  return t;
}

interface Mount {
  point: string;
  type: string;
}

/** /proc/mounts escapes space, tab, newline and backslash as octal. */
function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

export function readMounts(file = '/proc/mounts'): Mount[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  return text.split('\n').filter(Boolean).map((line) => {
    const [, point = '', type = ''] = line.split(' ');
    return { point: unescapeMount(point), type };
  });
}

/** The mount holding `path`: the longest mount point that is a prefix of its real path (or nearest existing parent). */
export function mountOf(path: string, mounts: Mount[]): Mount | undefined {
  // Symlinks resolved on the part that exists; the part not created yet is appended as written.
  let base = resolve(path);
  let tail = '';
  while (!existsSync(base) && dirname(base) !== base) {
    tail = `/${basename(base)}${tail}`;
    base = dirname(base);
  }
  try {
    base = realpathSync(base);
  } catch {
    /* keep the resolved path */
  }
  const p = base === '/' ? tail || '/' : `${base}${tail}`;
  let best: Mount | undefined;
  for (const m of mounts) {
    const inside = m.point === '/' || p === m.point || p.startsWith(m.point.endsWith('/') ? m.point : `${m.point}/`);
    if (inside && (!best || m.point.length >= best.point.length)) best = m;
  }
  return best;
}

const VOLATILE = new Set(['tmpfs', 'ramfs']);

export function tmpfsFindings(vectorPaths: string[], historyPath: string, mountsFile?: string): Finding[] {
  const mounts = readMounts(mountsFile);
  const out: Finding[] = [];
  const onTmpfs = (p: string) => {
    const m = mountOf(p, mounts);
    return m && VOLATILE.has(m.type) ? m : undefined;
  };
  const volatileVectors = vectorPaths.filter((p) => onTmpfs(p));
  if (volatileVectors.length > 0) {
    out.push(finding('mem0_vectors_on_tmpfs', 'error', `vector store path(s) on tmpfs, lost at reboot while history.db survives: ${volatileVectors.join(', ')} (mem0's local Qdrant defaults to /tmp/qdrant; use on_disk and a path under ~/.mem0)`, volatileVectors));
  }
  if (onTmpfs(historyPath)) out.push(finding('mem0_history_on_tmpfs', 'error', `history.db is on tmpfs and is lost at reboot: ${historyPath}`, [historyPath]));
  return out;
}

/**
 * The integrity job's report for a mem0 store, in the warden layout's shape: `rows` are points, `live` the ones
 * not past their expiration_date, `dangling` the dangling entity links.
 */
export async function mem0CheckReport(store: StoreHandle, opts: Mem0IntegrityOptions): Promise<CheckReport> {
  const findings = await mem0Integrity(store, opts);
  const count = (code: string) => findings.find((f) => f.code === code)?.count ?? 0;
  const integrity = findings.find((f) => f.code === 'mem0_history_integrity');
  const problems = findings.filter(isProblem);
  const rows = count('mem0_points');
  const expired = count('mem0_expired_pending');
  return {
    ok: problems.length === 0,
    store: store.name,
    path: store.path,
    checkedAt: toCanonical(opts.now),
    rows,
    live: rows - expired,
    gap: expired,
    integrity: integrity ? integrity.message.replace(/^history\.db PRAGMA integrity_check: /, '') : 'ok',
    journalMode: journalMode(store.db),
    dangling: count('mem0_dangling_entity_link'),
    reviewDue: 0,
    problems,
    notes: findings.filter((f) => !isProblem(f)),
  };
}
