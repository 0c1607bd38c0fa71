/**
 * Every kind of copy of a store's data memory-warden can leave, in one list, with the names it gives them and how
 * the local ones are found. Erase reads it to look everywhere (src/erase/leftovers.ts, targets.ts); the snapshot run,
 * restore and push read it to remove what killed runs left (removePartials, clearLeftovers, removeStaleFetches);
 * retention names what it retires from it. test/erase/copy-kinds/ makes every kind holding a person's text
 * and runs erase over it; test/snapshot/copy-creators.test.ts fails on a place in src that creates files and is
 * neither a kind's maker nor said to hold no store data. A new kind goes here first.
 */
import { randomBytes } from 'node:crypto';
import { lstatSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { Config } from '../config/config.js';
import { expandHome } from '../config/read.js';
import type { Logger } from '../log/logger.js';
import { running } from '../core/pid.js';
import type { StoreConfig } from '../store/config.js';
import { storeFiles } from '../store/files.js';
import { layoutFor } from '../layouts/registry.js';
import type { CollectionSnapshots } from '../vectors/contract.js';
import { PARTIAL_PREFIX, PENDING_PREFIX, storeSnapshotDir } from './layout.js';
import { readJournal, restoreJournalBase } from './journal.js';

/**
 * What erase does with a kind: `leftover` (of a run that was killed: worth nothing, so every erase that is not a dry
 * run removes it, whoever it erases, unless it is in use), `snapshot` (a backup: listed while it may hold the
 * person, exit 1, removed by `erase --snapshots`), `person` (memory-warden cannot prove it made it: listed while it
 * may hold the person, exit 1, never removed by memory-warden), `record` (memory-warden's own record of a job, proven
 * its own by where it is: every erase that is not a dry run removes one that holds the person; one still in use, a
 * job waiting or running, is listed and left, exit 1, until a later erase finds it done).
 */
export type EraseTreatment = 'leftover' | 'snapshot' | 'person' | 'record';

export interface CopyKind {
  name: string;
  /** Where it is, as a person finds it. */
  where: string;
  /** What makes it, and what normally removes it. */
  life: string;
  /** The files in src that create it (test/snapshot/copy-creators.test.ts holds every creator to this list). */
  madeIn: readonly string[];
  erase: EraseTreatment;
}

export const COPY_KINDS = [
  {
    name: 'snapshot', erase: 'snapshot', where: '<snapshot.root>/<store>/<time>/',
    life: 'a scheduled snapshot, proven by its manifest; retention deletes it (renamed to a retired folder first)',
    madeIn: ['src/snapshot/create.ts'],
  },
  {
    name: 'undo', erase: 'snapshot', where: '<snapshot.root>/<store>/<time>-pre-restore/',
    life: 'the pre-restore snapshot every restore takes first; a person deletes it',
    madeIn: ['src/snapshot/create.ts'],
  },
  {
    name: 'unproven-folder', erase: 'person', where: '<snapshot.root>/<store>/<time>/ without a manifest that proves it',
    life: 'a snapshot folder half deleted or changed by someone else; a person decides about it',
    madeIn: ['src/snapshot/create.ts'],
  },
  {
    name: 'partial', erase: 'leftover', where: '<snapshot.root>/<store>/.partial-<time>-<pid>-<random>/',
    life: 'a snapshot being built (a SQLite copy, or a database store\'s tables as COPY files in its tables/); renamed into place when complete, else removed by the next snapshot run',
    madeIn: ['src/snapshot/create.ts', 'src/snapshot/sqlite-copy.ts', 'src/vectors/qdrant/index.ts', 'src/engines/postgres/snapshot.ts'],
  },
  {
    name: 'retired', erase: 'leftover', where: '<snapshot.root>/<store>/.partial-<time>-retired/',
    life: 'a snapshot being deleted (retention, erase): renamed first, so a kill leaves this, never half a snapshot',
    madeIn: ['src/snapshot/retention.ts'],
  },
  {
    name: 'fetch', erase: 'leftover', where: '<snapshot.root>/<store>/.fetch-<time>-<pid>-<random>/',
    life: 'restore --target downloads (and decrypts: plaintext) a remote snapshot here; removed after the restore',
    madeIn: ['src/snapshot/targets/replicate.ts'],
  },
  {
    name: 'staging', erase: 'leftover', where: '.<file>.restore-<pid> beside each file of the store',
    life: 'a restore stages the snapshot\'s copy of a store file beside it, then renames it over the file',
    madeIn: ['src/snapshot/stage.ts'],
  },
  {
    name: 'spool', erase: 'leftover', where: '<uploadJournalDir>/spool-<pid>-<random>',
    life: 'an S3 upload without multipart uploads spools the file here, unlinked as soon as it is opened',
    madeIn: ['src/snapshot/targets/s3/upload.ts'],
  },
  {
    name: 'multipart-upload', erase: 'leftover', where: 'an unfinished multipart upload on an S3 target, journaled in <uploadJournalDir>',
    life: 'a push killed mid-upload; the next push aborts it by the id its journal entry kept (the entry stays while the storage cannot abort it)',
    madeIn: ['src/snapshot/targets/s3/upload.ts', 'src/snapshot/targets/s3/journal.ts'],
  },
  {
    name: 'target-snapshot', erase: 'snapshot', where: '<target>/<store>/<time>/ with its manifest',
    life: 'a pushed snapshot; the target\'s retention deletes it',
    madeIn: ['src/snapshot/targets/replicate.ts', 'src/snapshot/targets/checked.ts', 'src/snapshot/targets/local/index.ts', 'src/snapshot/targets/sftp/index.ts', 'src/snapshot/targets/s3/upload.ts'],
  },
  {
    name: 'target-unfinished', erase: 'leftover', where: '<target>/<store>/<time>/ with claim.json and no manifest',
    life: 'an upload or a delete that was killed: claim.json (written first, deleted last) proves memory-warden made it; the next push removes it',
    madeIn: ['src/snapshot/targets/replicate.ts', 'src/snapshot/targets/checked.ts', 'src/snapshot/targets/local/index.ts', 'src/snapshot/targets/sftp/index.ts', 'src/snapshot/targets/s3/upload.ts'],
  },
  {
    name: 'target-unproven', erase: 'person', where: '<target>/<store>/<time>/ that neither a manifest nor a claim.json proves memory-warden\'s',
    life: 'left by an older version, forged, or written by someone else; a person decides about it',
    madeIn: ['src/snapshot/targets/local/index.ts', 'src/snapshot/targets/sftp/index.ts', 'src/snapshot/targets/s3/upload.ts'],
  },
  {
    name: 'target-temp', erase: 'leftover', where: '<target>/<store>/<time>/…/.tmp-<random>-<file> (local folder, SFTP)',
    life: 'an object being written; renamed into place once verified, else removed by the next push',
    madeIn: ['src/snapshot/targets/local/index.ts', 'src/snapshot/targets/sftp/index.ts'],
  },
  {
    name: 'qdrant-server', erase: 'snapshot', where: 'a collection snapshot kept by the Qdrant server',
    life: 'made to download a collection or to recover one; deleted right after, noted in .server-snapshots/ until then',
    madeIn: ['src/snapshot/create.ts', 'src/snapshot/resume.ts', 'src/vectors/qdrant/index.ts'],
  },
  {
    name: 'redis-job', erase: 'record', where: '<redis.prefix>:<queue>:<job id> in Redis, in one of memory-warden\'s queues (src/erase/redis.ts)',
    life: 'a BullMQ job or task: its payload, result, error and log lines; kept once finished per worker.removeOnComplete / removeOnFail (a task: its result an hour, a failure a day)',
    madeIn: ['src/queue/tasks.ts', 'src/queue/remote.ts', 'src/queue/schedules.ts'],
  },
  {
    name: 'redis-event', erase: 'record', where: '<redis.prefix>:<queue>:events in Redis: an entry of a queue\'s event stream',
    life: 'BullMQ adds one for each step of a job, with its result or error; the stream keeps its last 10,000 entries',
    madeIn: ['src/queue/tasks.ts', 'src/queue/remote.ts', 'src/queue/schedules.ts'],
  },
] as const satisfies readonly CopyKind[];

export type CopyKindName = (typeof COPY_KINDS)[number]['name'];

export const copyKind = (name: CopyKindName): CopyKind => COPY_KINDS.find((k) => k.name === name)!;

/** The folder a snapshot is built in, beside where it is published. */
export function partialFolder(root: string, name: string): string {
  return join(root, `${PARTIAL_PREFIX}${name}-${process.pid}-${randomBytes(4).toString('hex')}`);
}

/** The name a snapshot folder is renamed to before it is deleted: a leftover, never a snapshot, if the delete is cut short. */
export function retiredFolder(root: string, name: string): string {
  return join(root, `${PARTIAL_PREFIX}${name}-retired`);
}

export const FETCH_PREFIX = '.fetch-';

/** The folder `restore --target` downloads a remote snapshot into: its pid says whether it is still in use. */
export function fetchFolder(root: string, name: string): string {
  return join(root, `${FETCH_PREFIX}${name}-${process.pid}-${randomBytes(4).toString('hex')}`);
}

/** The start of every staging copy's name beside a store file (`.<file>.restore-<pid>`, and its -wal, -shm). */
export const stagingPrefix = (file: string) => `.${basename(file)}.restore-`;

/** Where this process stages a snapshot's copy of `file`: beside it, so the swap is a rename. */
export function stagingPath(file: string): string {
  return join(dirname(file), `${stagingPrefix(file)}${process.pid}`);
}

/** Every file of the store a restore stages a copy beside: its db, and the vector files of its layout. */
export function stagedFiles(store: StoreConfig): string[] {
  return [...new Set([...storeFiles(store), ...layoutFor(store).vectorFiles(store).map((f) => expandHome(f))])];
}

/** A copy of the store on this machine left by a run that was killed (the `leftover` kinds found locally). */
export interface LocalCopy {
  kind: 'partial' | 'retired' | 'fetch' | 'staging';
  path: string;
  /** Why it must not be removed now (a restore still using it); absent for a leftover. */
  inUse?: string;
}

export const LOCAL_LEFTOVERS: readonly LocalCopy['kind'][] = ['staging', 'partial', 'retired', 'fetch'];

/** The kind of an entry of `<snapshot.root>/<store>/` made by a run (not a snapshot): partial, retired, fetch. */
export function rootEntryKind(entry: string): 'partial' | 'retired' | 'fetch' | undefined {
  if (entry.startsWith(PARTIAL_PREFIX)) return entry.endsWith('-retired') ? 'retired' : 'partial';
  if (entry.startsWith(FETCH_PREFIX)) return 'fetch';
  return undefined;
}

/**
 * The store's copies of these kinds left by killed runs, on this machine: staging copies beside every store file,
 * and the partial, retired and fetch folders under its snapshot folder. Only real files and folders: a link named
 * like one is not memory-warden's. A fetch folder a pending restore resumes from, or whose process still runs (it
 * is between its download and its restore), is in use.
 */
export function localLeftovers(config: Config, store: string, kinds: readonly LocalCopy['kind'][] = LOCAL_LEFTOVERS): LocalCopy[] {
  const storeConfig = config.stores[store]!;
  const out: LocalCopy[] = [];
  if (kinds.includes('staging')) {
    for (const file of stagedFiles(storeConfig)) {
      for (const n of entries(dirname(file)).filter((x) => x.startsWith(stagingPrefix(file)))) {
        const path = join(dirname(file), n);
        if (lstatSync(path, { throwIfNoEntry: false })?.isFile()) out.push({ kind: 'staging', path });
      }
    }
  }
  const root = storeSnapshotDir(config, store);
  const wanted = entries(root).filter((n) => kinds.includes(rootEntryKind(n)!));
  if (wanted.length === 0) return out;
  const pending = wanted.some((n) => rootEntryKind(n) === 'fetch') ? readJournal(restoreJournalBase(config, store))?.from : undefined;
  for (const n of wanted) {
    const path = join(root, n);
    if (!lstatSync(path, { throwIfNoEntry: false })?.isDirectory()) continue;
    const kind = rootEntryKind(n)!;
    const pid = kind === 'fetch' ? Number(/-(\d+)-[0-9a-f]{8}$/.exec(n)?.[1]) : NaN;
    const inUse = path === pending ? 'the interrupted restore resumes from it' : running(pid) ? `process ${pid} is restoring from it` : undefined;
    out.push({ kind, path, ...(inUse ? { inUse } : {}) });
  }
  return out;
}

/** Remove one local leftover (not one in use: the caller checks). */
export function removeLocalCopy(c: LocalCopy): void {
  rmSync(c.path, { recursive: c.kind !== 'staging', force: true });
}

/**
 * Partial and retired folders under `dir` (a store's snapshot folder), removed with the server-side Qdrant snapshots
 * they noted as not yet deleted (`pending-N.json`, written by earlier versions). Only called while holding the
 * snapshot lock and the store's maintenance lock: every one is a leftover of a killed run.
 */
export async function removePartials(dir: string, q: CollectionSnapshots | undefined, log: Logger): Promise<string[]> {
  const partial = entries(dir).filter((n) => {
    const kind = rootEntryKind(n);
    return (kind === 'partial' || kind === 'retired') && lstatSync(join(dir, n)).isDirectory();
  });
  for (const n of partial) {
    const folder = join(dir, n);
    for (const f of entries(folder).filter((x) => x.startsWith(PENDING_PREFIX))) {
      try {
        const { collection, snapshot } = JSON.parse(readFileSync(join(folder, f), 'utf8')) as { collection: string; snapshot: string };
        if (q) await q.deleteSnapshot(collection, snapshot);
      } catch (err) {
        log.warn({ folder, file: f, err: (err as Error).message }, 'could not delete a server-side snapshot left by an interrupted run');
      }
    }
    rmSync(folder, { recursive: true, force: true });
  }
  return partial;
}

function entries(dir: string): string[] {
  try {
    return readdirSync(dir).sort();
  } catch {
    return [];
  }
}
