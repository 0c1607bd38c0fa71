import { spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import YAML from 'yaml';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Config } from '../../../src/config/config.js';
import { validateConfig } from '../../../src/config/config.js';
import { silentLogger } from '../../../src/log/logger.js';
import { COPY_KINDS, copyKind, localLeftovers, type CopyKindName, type EraseTreatment } from '../../../src/snapshot/copies.js';
import { takeSnapshot } from '../../../src/snapshot/create.js';
import { noteServerSnapshot } from '../../../src/snapshot/server-snapshots.js';
import { replicateStore } from '../../../src/snapshot/targets/replicate.js';
import { uploadJournalFor } from '../../../src/snapshot/targets/s3/journal.js';
import type { S3TargetConfig } from '../../../src/snapshot/targets/s3/schema.js';
import { collectionSnapshotsFor } from '../../../src/vectors/registry.js';
import { cliAsync } from '../../helpers/cli.js';
import { tempDir } from '../../helpers/store.js';
import { expectEveryPair, expectShards, kindsFor, kindsOfShard, makeKind, shardOf, STORE_KINDS, type KindName, type KindStore } from '../../helpers/store-kinds.js';
import { localPlace, s3Place, type TargetPlace } from '../../snapshot/targets/fixtures.js';
import { Queue, QueueEvents, Worker } from 'bullmq';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../../helpers/redis.js';
import { recordQueueUse } from '../../../src/state/state.js';

/**
 * The conformance suite over the kinds of copy memory-warden can leave (src/snapshot/copies.ts): for every kind, that
 * copy is made holding Carol's memory, and erase must find it (the dry run lists it), then deal with it as the
 * registry says: a leftover is gone after any erase; a snapshot stays (exit 1) until `--snapshots`; a copy
 * memory-warden cannot prove it made stays, found, exit 1, whatever is asked. Each kind of copy is made of every kind
 * of store (test/helpers/store-kinds.ts: every (engine, layout) pair) that can have it; NOT_MADE says which cannot,
 * and why. A kind added to the registry without a maker here does not compile; one erase does not find fails here.
 */
const T0 = Date.parse('2026-11-29T02:00:00Z');
const CAROL = 'Carol Whitfield keeps the vault code 4471 in her left shoe';
const log = silentLogger;

let disk: TargetPlace;
let bucket: TargetPlace;
let kind: KindStore | undefined;
let tmp: ReturnType<typeof tempDir> | undefined;
let redis: TestRedis;
let prefix: string | undefined;

interface World {
  kind: KindStore;
  dir: string;
  config: Config;
  file: string;
  /** `<snapshot.root>/agent` */
  root: string;
  /** The files of a snapshot of the store (its manifest left out) taken while Carol was in it, outside snapshot.root. */
  source: string;
  disk: { name: string; path: string };
  s3: S3TargetConfig;
  /** The Redis key prefix of this world's queues. */
  prefix: string;
  env: Record<string, string>;
}

async function world(name: KindName = 'sqlite×warden'): Promise<World> {
  tmp = tempDir(`mw-copy-kinds-${name.replace('×', '-')}-`);
  const dir = tmp.dir;
  const k = (kind = await makeKind(name, dir, { now: T0 }));
  await k.add({ text: CAROL, user: 'carol', at: T0 - 86_400_000 });
  for (let i = 0; i < 3; i++) await k.add({ text: `Bob fact ${i}`, user: 'bob', at: T0 - 86_400_000 });
  k.settle();
  const local = { ...disk.config(), name: 'disk' } as { name: string; path: string };
  const s3 = { ...bucket.config(), name: 'bucket' } as S3TargetConfig;
  const queues = { redis: { url: redis.url, prefix: (prefix = uniquePrefix('copy-kinds')) } };
  const raw = (store: Record<string, unknown>, targets: unknown[], root = join(dir, 'backups')) => ({
    stateDb: join(dir, 'state.db'), snapshot: { root, targets }, stores: { agent: store }, ...queues,
  });
  // What a copy of the store holds: a snapshot's files, taken where erase does not look.
  const elsewhere = await takeSnapshot(validateConfig(raw(k.store, [], join(dir, 'elsewhere'))), 'agent', { now: () => T0 - 1000, log });
  rmSync(join(elsewhere.dir, 'manifest.json'));
  const file = join(dir, 'warden.yaml');
  // Credentials as a user writes them: from the environment.
  writeFileSync(file, YAML.stringify(raw(k.fileStore, [local, { ...s3, accessKeyId: '${MW_TEST_KEY}', secretAccessKey: '${MW_TEST_SECRET}' }])));
  return {
    kind: k, dir, config: validateConfig(raw(k.store, [local, s3])), file, root: join(dir, 'backups', 'agent'), source: elsewhere.dir, disk: local, s3, prefix,
    env: { ...k.env, MW_TEST_KEY: s3.accessKeyId!, MW_TEST_SECRET: s3.secretAccessKey! },
  };
}

/** A pid no process has now: a run that was killed. */
function deadPid(): number {
  return spawnSync(process.execPath, ['-e', '0']).pid!;
}

/** What a maker made: the kinds of copy that now exist (the one under test first), the label erase must list, and whether the copy is still there. */
interface Made {
  kinds: CopyKindName[];
  label: RegExp;
  present(): boolean | Promise<boolean>;
}

const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const exact = (s: string) => new RegExp(`^${esc(s)}$`);

/** A folder holding a copy of the store (Carol's memory in it): a snapshot's files, without its manifest. */
function storeCopyIn(dir: string, w: World): string {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  cpSync(w.source, dir, { recursive: true });
  return dir;
}

/** One file of the store's copy, the biggest (the SQLite file, or the memory table's rows). */
function copyFile(w: World): string {
  const files = readdirSync(w.source, { recursive: true, withFileTypes: true }).filter((f) => f.isFile()).map((f) => join(f.parentPath, f.name));
  return files.sort((a, b) => statSync(b).size - statSync(a).size)[0]!;
}

/** A snapshot pushed to the local target, its local folder removed: the target holds the only copy. */
async function pushed(w: World): Promise<{ name: string; dir: string }> {
  const s = await takeSnapshot(w.config, 'agent', { now: () => T0, log });
  await replicateStore(w.config, 'agent', { log, now: () => T0, only: 'disk' });
  rmSync(s.dir, { recursive: true });
  return { name: s.name, dir: join(w.disk.path, 'agent', s.name) };
}

/**
 * A job run through BullMQ on the world's Redis, as a worker runs one: finished with `result` (the job's return
 * value, kept in the job and in the queue's event stream). `read`: its result read and the job removed, as a task's
 * waiter does (src/queue/tasks.ts): the event stream keeps the only copy.
 */
async function ranJob(w: World, queueName: string, data: unknown, result: unknown, read = false): Promise<{ queue: Queue; id: string }> {
  const connection = { url: redis.url };
  // The worker that runs such a job records that the queue is used here, and erase then searches it.
  recordQueueUse(w.config.stateDb, w.prefix, 'worker', Date.now());
  const queue = new Queue(queueName, { connection, prefix: w.prefix });
  const events = new QueueEvents(queueName, { connection, prefix: w.prefix });
  await events.waitUntilReady();
  const worker = new Worker(queueName, async () => result, { connection, prefix: w.prefix });
  try {
    const job = await queue.add('verify', data, { removeOnComplete: { count: 100 } });
    await job.waitUntilFinished(events);
    if (read) await job.remove();
    return { queue, id: job.id! };
  } finally {
    await worker.close();
    await events.close();
  }
}

const MAKERS: { [K in CopyKindName]: (w: World) => Promise<Made> } = {
  'redis-job': async (w) => {
    // A drift task's result quoting the memory's text, kept after its waiter went away.
    const { queue, id } = await ranJob(w, 'maintenance-verify', { v: 1, store: 'agent' }, { verdict: 'stale', evidence: CAROL });
    const key = `${w.prefix}:maintenance-verify:${id}`;
    await queue.close();
    return { kinds: ['redis-job', 'redis-event'], label: exact(`redis:${key}`), present: async () => (await redis.client.exists(key)) === 1 };
  },
  'redis-event': async (w) => {
    const { queue } = await ranJob(w, 'maintenance-verify', { v: 1, store: 'agent' }, { verdict: 'stale', evidence: CAROL }, true);
    await queue.close();
    const stream = `${w.prefix}:maintenance-verify:events`;
    return {
      kinds: ['redis-event'], label: exact(`redis:${stream}`),
      present: async () => (await redis.client.xrange(stream, '-', '+')).some(([, kv]) => kv.some((v) => v.includes('4471'))),
    };
  },
  snapshot: async (w) => {
    const s = await takeSnapshot(w.config, 'agent', { now: () => T0, log });
    return { kinds: ['snapshot'], label: exact(s.dir), present: () => existsSync(s.dir) };
  },
  undo: async (w) => {
    const s = await takeSnapshot(w.config, 'agent', { now: () => T0, log, reason: 'pre-restore' });
    return { kinds: ['undo'], label: exact(s.dir), present: () => existsSync(s.dir) };
  },
  'unproven-folder': async (w) => {
    const dir = storeCopyIn(join(w.root, '2026-11-01T000000Z'), w); // half deleted: its manifest gone
    return { kinds: ['unproven-folder'], label: exact(dir), present: () => existsSync(dir) && readdirSync(dir).length > 0 };
  },
  partial: async (w) => {
    const dir = storeCopyIn(join(w.root, `.partial-2026-11-29T020000Z-${deadPid()}-0badc0de`), w);
    return { kinds: ['partial'], label: exact(dir), present: () => existsSync(dir) };
  },
  retired: async (w) => {
    const dir = storeCopyIn(join(w.root, '.partial-2026-11-28T020000Z-retired'), w);
    return { kinds: ['retired'], label: exact(dir), present: () => existsSync(dir) };
  },
  fetch: async (w) => {
    const dir = storeCopyIn(join(w.root, `.fetch-2026-11-28T020000Z-${deadPid()}-0badc0de`), w); // killed after the download
    return { kinds: ['fetch'], label: exact(dir), present: () => existsSync(dir) };
  },
  staging: async (w) => {
    const db = w.kind.store.db as string;
    const path = join(dirname(db), `.${basename(db)}.restore-${deadPid()}`);
    copyFileSync(db, path);
    return { kinds: ['staging'], label: exact(path), present: () => existsSync(path) };
  },
  spool: async (w) => {
    mkdirSync(w.s3.uploadJournalDir, { recursive: true });
    const path = join(w.s3.uploadJournalDir, `spool-${deadPid()}-0123456789abcdef01234567`);
    writeFileSync(path, CAROL); // an upload killed before it could unlink its spool file
    return { kinds: ['spool'], label: new RegExp(`^target:bucket: spool file ${esc(path)}$`), present: () => existsSync(path) };
  },
  'multipart-upload': async (w) => {
    const journal = uploadJournalFor(w.s3, 'agent');
    const key = `${w.s3.prefix}agent/2026-11-29T020000Z/store.db`;
    const id = `upload-${deadPid()}`;
    journal.started(journal.begin(key), id);
    bucket.s3!.uploads.set(id, { key, parts: new Map([[1, { body: Buffer.from(CAROL), etag: '"x"' }]]) });
    return { kinds: ['multipart-upload'], label: /^target:bucket:2026-11-29T020000Z\/store\.db \(multipart upload /, present: () => bucket.s3!.uploads.has(id) };
  },
  'target-snapshot': async (w) => {
    const s = await pushed(w);
    return { kinds: ['target-snapshot'], label: exact(`target:disk/${s.name}`), present: () => existsSync(s.dir) };
  },
  'target-unfinished': async (w) => {
    const s = await pushed(w);
    rmSync(join(s.dir, 'manifest.json')); // a delete killed after its first step (or an upload before its last)
    return { kinds: ['target-unfinished'], label: exact(`target:disk/${s.name}`), present: () => existsSync(s.dir) };
  },
  'target-unproven': async (w) => {
    const dir = storeCopyIn(join(w.disk.path, 'agent', '2026-11-01T000000Z'), w); // an older version's killed upload: no claim
    return { kinds: ['target-unproven'], label: exact('target:disk/2026-11-01T000000Z'), present: () => existsSync(dir) };
  },
  'target-temp': async (w) => {
    const s = await pushed(w);
    const tmp = join(s.dir, '.tmp-0badc0de-store.db'); // a put killed before its rename
    copyFileSync(copyFile(w), tmp);
    return { kinds: ['target-temp', 'target-snapshot'], label: exact(`target:disk:${s.name}/.tmp-0badc0de-store.db`), present: () => existsSync(tmp) };
  },
  'qdrant-server': async (w) => {
    const collection = w.config.stores.agent!.qdrant!.collections[0]!;
    const snap = await collectionSnapshotsFor(w.config.stores.agent!)!.createSnapshot(collection);
    noteServerSnapshot(w.root, { collection, snapshot: snap.name, kind: 'created' }); // a snapshot run killed before deleting it
    return { kinds: ['qdrant-server'], label: exact(`qdrant:${collection}/${snap.name}`), present: async () => (await w.kind.qdrant!.snapshotNames(collection)).includes(snap.name) };
  },
};

const ORDER: EraseTreatment[] = ['record', 'leftover', 'snapshot', 'person'];
/** Gone after any erase that is not a dry run (a record: the ones holding the person). */
const goes = (t: EraseTreatment) => t === 'leftover' || t === 'record';
const strongest = (kinds: CopyKindName[]) => kinds.map((k) => copyKind(k).erase).reduce((a, b) => (ORDER.indexOf(a) > ORDER.indexOf(b) ? a : b));

async function erase(w: World, ...flags: string[]) {
  const r = await cliAsync(['erase', '--config', w.file, '--store', 'agent', '--user', 'carol', '--json', ...flags], w.env);
  let receipt: { snapshots: { found: string[]; deleted: string[]; unverified: string[] } };
  try {
    receipt = r.json();
  } catch {
    throw new Error(`erase ${flags.join(' ')}: exit ${r.code}: ${r.stderr}`);
  }
  return { code: r.code, ...receipt.snapshots };
}

/** The kinds of copy a kind of store cannot have, and why: every other pair is made and erased below. */
function notMade(copy: CopyKindName, store: KindName): string | undefined {
  const k = STORE_KINDS[store]!;
  if (copy === 'staging' && k.engine === 'postgres') return 'a PostgreSQL restore stages its tables in a schema inside its one transaction: a kill rolls it back, nothing stays';
  if (copy === 'qdrant-server' && !k.qdrant) return 'the store has no Qdrant collections beside it';
  return undefined;
}

/**
 * Copies erase does not deal with yet on a kind of store: product gaps, each named, left out of the run (not skipped);
 * `MW_TEST_GAPS=1` runs them, failing until the gap is closed.
 */
const COPY_GAPS: Partial<Record<KindName, Partial<Record<CopyKindName, string>>>> = {};

const rowsOf = (stores: KindName[]) => stores.flatMap((store) => COPY_KINDS.filter((k) => !notMade(k.name, store))
  .filter((k) => process.env.MW_TEST_GAPS === '1' || !COPY_GAPS[store]?.[k.name]).map((k) => [k.name, k.erase, store] as const));
const ROWS = rowsOf(kindsFor('copy-kinds'));

/** The suite's files: shard-1.test.ts … shard-N.test.ts, each running the rows of its kinds (shard 1 the rest too). */
export const SHARDS = 4;

export function copyKindsSuite(fileUrl: string): void {
  const shard = shardOf(fileUrl, SHARDS);
  beforeAll(async () => {
    disk = await localPlace();
    bucket = await s3Place();
    redis = await startTestRedis();
  }, 60_000);
  afterAll(async () => {
    await disk.stop();
    await bucket.stop();
    await redis.stop();
  });
  afterEach(async () => {
    await kind?.close();
    kind = undefined;
    tmp?.cleanup();
    tmp = undefined;
    if (prefix) await deletePrefix(redis.client, prefix);
    prefix = undefined;
  });

  const first = shard.index === 1;
  describe('every kind of copy memory-warden can leave is found by erase, and dealt with as its kind says', { timeout: 120_000 }, () => {
    if (first) it('every (engine, layout) pair the config accepts is a kind of store here, and every kind of copy is made of one at least', () => {
      expectEveryPair('copy-kinds');
      expectShards(shard);
      for (const k of COPY_KINDS) expect(ROWS.some(([copy]) => copy === k.name), k.name).toBe(true);
    });

    if (first) it('the suite covers the registry: one maker per kind, each kind made somewhere in src', () => {
      expect(Object.keys(MAKERS).sort()).toEqual(COPY_KINDS.map((k) => k.name).sort());
      for (const k of COPY_KINDS) for (const f of k.madeIn) expect(existsSync(f), `${k.name}: ${f}`).toBe(true);
      // docs/erase.md lists every kind with what erase does with it.
      const doc = readFileSync('docs/erase.md', 'utf8');
      for (const k of COPY_KINDS) expect(doc, k.name).toMatch(new RegExp(`^\\| \`${esc(k.name)}\` \\|.*\\| ${k.erase} \\|$`, 'm'));
    });

    it.each(rowsOf(kindsOfShard('copy-kinds', shard)))('%s (%s) of a %s store', async (kind, _treatment, store) => {
      const w = await world(store);
      const made = await MAKERS[kind](w);
      const treatment = copyKind(kind).erase; // what happens to this copy
      const exit = strongest(made.kinds); // what erase's exit code says of all the maker made
      expect(await made.present(), 'the maker made it').toBe(true);

      const dry = await erase(w, '--dry-run');
      expect(dry.code).toBe(0);
      expect(dry.found, 'the dry run lists it').toContainEqual(expect.stringMatching(made.label));
      expect(await made.present(), 'a dry run changes nothing').toBe(true);

      const plain = await erase(w);
      if (goes(treatment)) {
        expect(await made.present(), 'a leftover goes with any erase').toBe(false);
        expect(plain.deleted).toContainEqual(expect.stringMatching(made.label));
      } else {
        expect(await made.present(), 'a backup stays without --snapshots').toBe(true);
        expect(plain.found).toContainEqual(expect.stringMatching(made.label));
      }
      expect(plain.code, `exit 1 while a copy remains: ${JSON.stringify(plain)}`).toBe(goes(exit) ? 0 : 1);
      // The next run knows her only by the keyed hashes the first kept: it still finds what remains.
      const snaps = await erase(w, '--snapshots');
      expect(await made.present()).toBe(treatment === 'person');
      expect(snaps.code, JSON.stringify(snaps)).toBe(exit === 'person' ? 1 : 0);
      if (treatment === 'person') expect(snaps.found).toContainEqual(expect.stringMatching(made.label));
      const again = await erase(w);
      expect(again.code).toBe(exit === 'person' ? 1 : 0);
    });
  });

  if (first) describe('a copy still in use is listed and left', { timeout: 120_000 }, () => {
    it('a download folder whose restore still runs (its pid is alive): found, cannot be ruled out, not removed, exit 1; gone once it ends', async () => {
      const w = await world();
      const dir = storeCopyIn(join(w.root, `.fetch-2026-11-28T020000Z-${process.pid}-0badc0de`), w); // this process: alive
      const r = await erase(w, '--snapshots');
      expect(r.code).toBe(1);
      expect(r.found).toContain(dir);
      expect(r.unverified).toContain(dir);
      expect(r.deleted).not.toContain(dir);
      expect(readdirSync(dir)).not.toEqual([]);
      const ended = dir.replace(`-${process.pid}-`, `-${deadPid()}-`);
      renameSync(dir, ended);
      const again = await erase(w, '--snapshots');
      expect(again.deleted).toContain(ended);
      expect(again.code).toBe(0);
      expect(existsSync(ended)).toBe(false);
    });
  });

  if (first) describe('staging copies are looked for beside every file a restore stages', () => {
    it('mem0\'s SQLite vector files and Mastra\'s vector file, not only the store\'s db', () => {
      const dir = join((disk.config() as { path: string }).path, 'stores');
      mkdirSync(dir, { recursive: true });
      const config = validateConfig({
        stateDb: join(dir, 'state.db'),
        snapshot: { root: join(dir, 'backups') },
        stores: {
          m: { layout: 'mem0', db: join(dir, 'history.db'), mem0: { vectorStore: 'sqlite', vectorDb: join(dir, 'vector_store.db') } },
          a: { layout: 'mastra', db: join(dir, 'mastra.db'), mastra: { vectorDb: join(dir, 'vectors.db') } },
        },
      });
      for (const f of ['.history.db.restore-1', '.vector_store.db.restore-2', '.vector_store.db.restore-2-wal', '.mastra.db.restore-3', '.vectors.db.restore-4']) writeFileSync(join(dir, f), CAROL);
      const found = (store: string) => localLeftovers(config, store, ['staging']).map((c) => c.path.slice(dir.length + 1)).sort();
      expect(found('m')).toEqual(expect.arrayContaining(['.history.db.restore-1', '.vector_store.db.restore-2', '.vector_store.db.restore-2-wal']));
      expect(found('a')).toEqual(['.mastra.db.restore-3', '.vectors.db.restore-4']);
      expect(readdirSync(dir)).toContain('.vectors.db.restore-4');
    });
  });
}
