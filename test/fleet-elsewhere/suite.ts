import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, watch, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import type { Command } from 'commander';
import { buildProgram } from '../../src/program.js';
import { validateConfig } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { startReviewServer } from '../../src/review-web/server.js';
import { reviewLink } from '../../src/digest/review-links.js';
import { reviewKey } from '../../src/links/tokens.js';
import { cliAsync, type CliResult } from '../helpers/cli.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { assertBuilt, countRows, makeStore, tempDir } from '../queue/fixtures.js';
import { expectEveryPair, expectShards, kindsOfShard, makeKind, shardOf, STORE_KINDS, type KindStore } from '../helpers/store-kinds.js';
import { ENGINE_REACH } from '../../src/engines/registry.js';

/**
 * A fleet's config on every machine: a store whose `host:` is another machine is that machine's file, whatever sits
 * at its path here. Every command on such a store runs there, through that host's queue, or is refused naming the
 * host, exit 2, before anything is opened: the file at that path here is left byte for byte, not even opened (a
 * store in WAL mode gets a -shm file from any SQLite connection, a read-only one too, and a writer's lock file).
 * Real CLI processes on "box-a" (MEMORY_WARDEN_HOST), a store of "box-b" whose path exists here, of every kind whose
 * store is files on a host (test/helpers/store-kinds.ts); a store every host reaches (PostgreSQL) cannot be placed on
 * a host at all: the config refuses it.
 */

const HERE = 'box-a';
const THERE = 'box-b';

interface Row {
  /** The command's words, then its arguments; `--config` and the store are added (see `names`). */
  argv: string[];
  /**
   * How the store is named: `--store sales-bot` (store), `--db <its path>` with the config (db), `--link sales-bot`
   * (serve's link). Each command is run once per way it takes.
   */
  names: ('store' | 'db' | 'link')[];
  /** Runs on the store's host through its queue: at its --timeout it says it waited for that host. */
  routed?: boolean;
}

/** Every command that takes a store, as a person would type it. The test below fails when one is missing here. */
const TABLE: Record<string, Row> = {
  init: { argv: [], names: ['store'] },
  check: { argv: [], names: ['store', 'db'] },
  'run digest': { argv: [], names: ['store', 'db'] },
  'run drift': { argv: [], names: ['store', 'db'] },
  'run integrity': { argv: [], names: ['store', 'db'] },
  'run prune': { argv: [], names: ['store', 'db'] },
  'run snapshot': { argv: [], names: ['store', 'db'] },
  'run erase': { argv: ['--subject', 'pnpm', '--timeout', '0.5'], names: ['store', 'db'], routed: true },
  'run restore': { argv: ['/srv/snapshots/x', '--timeout', '0.5'], names: ['store', 'db'], routed: true },
  erase: { argv: ['--subject', 'pnpm', '--timeout', '0.5'], names: ['store', 'db'], routed: true },
  restore: { argv: ['/srv/snapshots/x', '--timeout', '0.5'], names: ['store', 'db'], routed: true },
  'erase receipts': { argv: [], names: ['store'] },
  enqueue: { argv: ['prune', '--timeout', '0.5'], names: ['store'], routed: true },
  'repair dangling': { argv: [], names: ['store', 'db'] },
  'repair timestamps': { argv: [], names: ['store', 'db'] },
  'repair orphans': { argv: [], names: ['store', 'db'] },
  'review list': { argv: [], names: ['store', 'db'] },
  'review confirm': { argv: ['l_0'], names: ['store', 'db'] },
  'review supersede': { argv: ['l_0', '--fact', 'prefers yarn', '--source', 'message'], names: ['store', 'db'] },
  'review expire': { argv: ['l_0', '--in', '7d'], names: ['store', 'db'] },
  'review delete': { argv: ['l_0'], names: ['store', 'db'] },
  'snapshots list': { argv: [], names: ['store', 'db'] },
  'snapshots verify': { argv: ['--target', 'nas'], names: ['store', 'db'] },
  'snapshots push': { argv: [], names: ['store', 'db'] },
  digest: { argv: ['--preview'], names: ['store', 'db'] },
  'digest --send': { argv: ['--send'], names: ['store', 'db'] },
  serve: { argv: [], names: ['link'] },
};

/** Every command under `cmd`, by the words that name it. */
function commands(cmd: Command, path: string[] = []): { cmd: Command; path: string }[] {
  return cmd.commands.flatMap((c) => [{ cmd: c, path: [...path, c.name()].join(' ') }, ...commands(c, [...path, c.name()])]);
}

/**
 * A command that can be given a store: by name (--store, serve's --link), or by its file (--db) beside a config
 * that may say where it lives (`init --db` takes a file and reads no config).
 */
const takesStore = (cmd: Command) => {
  const has = (long: string) => cmd.options.some((o) => o.long === long);
  return has('--store') || has('--link') || (has('--db') && has('--config'));
};

const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);
const DAY = 86_400_000;

/** The suite's files: shard-1.test.ts … shard-N.test.ts, each running its kinds of store (shard 1 the check of the pairs too). */
export const SHARDS = 2;

export function fleetElsewhereSuite(fileUrl: string): void {
  const shard = shardOf(fileUrl, SHARDS);
  if (shard.index === 1) it('every (engine, layout) pair the config accepts is in this suite', () => {
    expectEveryPair('fleet-elsewhere');
    expectShards(shard);
  });

  /** The kinds whose store is files on one host (a `host:` of their own) and those a database every host reaches. */
  const onAHost = kindsOfShard('fleet-elsewhere', shard).filter((k) => ENGINE_REACH[STORE_KINDS[k]!.engine] === 'host');
  const everywhere = kindsOfShard('fleet-elsewhere', shard).filter((k) => ENGINE_REACH[STORE_KINDS[k]!.engine] === 'fleet');

  describe.each(onAHost)('a %s store that lives on another host', { timeout: 300_000 }, (kindName) => {
    let redis: TestRedis;
    let prefix: string;
    let dir: string;
    let kind: KindStore;
    let there: string;
    let file: string;
    let env: Record<string, string>;

    beforeAll(async () => {
      assertBuilt();
      redis = await startTestRedis();
      prefix = uniquePrefix('fleet-elsewhere');
      dir = tempDir('fleet-elsewhere');
      for (const d of ['a', 'srv', 'nas', 'made']) mkdirSync(join(dir, d));
      // What is at sales-bot's path on this machine: a store with memories prune would delete and review would change.
      kind = await makeKind(kindName, join(dir, 'made'), { now: NOW });
      for (let i = 0; i < 3; i++) await kind.add({ text: `likes tea ${i}`, user: 'ana', at: NOW - 40 * DAY });
      for (let i = 0; i < 4; i++) await kind.add({ text: `in Oslo this week ${i}`, user: 'ana', at: NOW - 40 * DAY, expired: true });
      kind.settle();
      // The store's files copied to the watched folder: a writer of this process (libsql's driver lets go of its WAL
      // when it is collected, not at close) never touches them there.
      const made = kind.store.db as string;
      there = join(dir, 'srv', basename(made));
      for (const f of [made, `${made}-wal`]) if (existsSync(f)) copyFileSync(f, join(dir, 'srv', basename(f)));
      if (kind.layout === 'warden') expect(readFileSync(there).readUInt8(18)).toBe(2); // WAL: any SQLite connection leaves a -shm beside it
      file = join(dir, 'fleet.yaml');
      writeFileSync(file, JSON.stringify({
        stateDb: join(dir, 'a', 'state.db'),
        snapshot: { root: join(dir, 'a', 'snapshots'), targets: [{ name: 'nas', type: 'local', path: join(dir, 'nas') }] },
        redis: { url: redis.url, prefix },
        review: { secretEnv: 'FLEET_TEST_REVIEW_SECRET' },
        stores: {
          'support-bot': { db: makeStore(join(dir, 'a', 'memory.db'), { live: 1 }), host: HERE },
          'sales-bot': { ...kind.fileStore, db: there, host: THERE },
        },
      }));
      env = { ...kind.env, MEMORY_WARDEN_HOST: HERE, REDIS_URL: '', FLEET_TEST_REVIEW_SECRET: 'x'.repeat(40) };
    });

    afterAll(async () => {
      if (prefix) await deletePrefix(redis.client, prefix);
      await redis?.stop();
      await kind?.close();
    });

    /** The folder of the store's file as it is: each file's bytes, mode and times. */
    const folder = () => Object.fromEntries(readdirSync(join(dir, 'srv')).map((f) => {
      const p = join(dir, 'srv', f);
      const st = statSync(p);
      return [f, { sha256: createHash('sha256').update(readFileSync(p)).digest('hex'), mode: st.mode, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs }];
    }));

    /** Run the CLI as box-a and record every change inside the store's folder while it runs (a file made, written, removed). */
    async function watched(argv: string[]): Promise<{ r: CliResult; events: string[] }> {
      const events: string[] = [];
      const watcher = watch(join(dir, 'srv'), (type, name) => events.push(`${type} ${name}`));
      try {
        const r = await cliAsync(argv, env);
        await new Promise((resolve) => setTimeout(resolve, 100)); // the last events of the child, delivered
        return { r, events };
      } finally {
        watcher.close();
      }
    }

    const rows = Object.entries(TABLE).flatMap(([name, row]) => row.names.map((how) => ({ name, row, how })));

    it.each(rows)('$name, the store given by $how: exit 2, one line naming host box-b, its file here untouched', async ({ name, row, how }) => {
      const words = name.split(' ').filter((w) => !w.startsWith('--'));
      const given = how === 'store' ? ['--store', 'sales-bot'] : how === 'db' ? ['--db', there] : ['--link', 'sales-bot'];
      const before = folder();
      const { r, events } = await watched([...words, ...row.argv, '--config', file, ...given]);
      const lines = r.stderr.split('\n').filter((l) => l.startsWith('memory-warden:'));
      expect(r.code, r.stderr).toBe(2);
      expect(lines, r.stderr).toHaveLength(1);
      expect(lines[0]).toContain(row.routed ? `host ${THERE}` : `lives on host ${THERE}`);
      if (row.routed) expect(lines[0]).toMatch(/no result within 0\.5 s \(is a worker running on host box-b\?/);
      else expect(lines[0]).toContain(`this machine is ${HERE}`);
      expect(r.stdout).toBe('');
      expect(events).toEqual([]);
      expect(folder()).toEqual(before);
    });

    it('a routed request nobody took is not left for box-b: erase and restore are withdrawn at their --timeout', async () => {
      // enqueue keeps its job queued at the timeout, as documented; erase and restore withdraw theirs (none is left)
      const waiting = await redis.client.lrange(`${prefix}:maintenance.${THERE}:wait`, 0, -1);
      const names = await Promise.all(waiting.map((id) => redis.client.hget(`${prefix}:maintenance.${THERE}:${id}`, 'name')));
      expect(names.sort()).toEqual(['prune']);
    });

    it('every command that takes a store is in the table above', () => {
      const taking = commands(buildProgram()).filter((c) => takesStore(c.cmd)).map((c) => c.path).sort();
      expect(taking.length).toBeGreaterThan(20);
      const tabled = [...new Set(Object.keys(TABLE).map((n) => n.split(' ').filter((w) => !w.startsWith('--')).join(' ')))].sort();
      expect(taking).toEqual(tabled);
    });

    it('without --store, the only store of a config that lives on box-b is refused the same way', async () => {
      const single = join(dir, 'single.yaml');
      writeFileSync(single, JSON.stringify({ stateDb: join(dir, 'a', 'state.db'), stores: { 'sales-bot': { ...kind.fileStore, db: there, host: THERE } } }));
      const before = folder();
      for (const argv of [['check'], ['run', 'prune'], ['review', 'delete', 'l_0'], ['repair', 'dangling']]) {
        const { r, events } = await watched([...argv, '--config', single]);
        expect(r.code, argv.join(' ')).toBe(2);
        expect(r.stderr).toContain(`store sales-bot lives on host ${THERE}, and this machine is ${HERE}`);
        expect(events).toEqual([]);
      }
      // the digest covers every store when none is named: this machine holds none of them
      for (const argv of [['run', 'digest'], ['digest', '--send']]) {
        const { r, events } = await watched([...argv, '--config', single]);
        expect(r.code, argv.join(' ')).toBe(2);
        expect(r.stderr).toContain(`digest: the stores live on host ${THERE}, and this machine is ${HERE}`);
        expect(events).toEqual([]);
      }
      expect(folder()).toEqual(before);
    });

    it('a refused job says how to run it there from here', async () => {
      const prune = await cliAsync(['run', 'prune', '--config', file, '--store', 'sales-bot'], env);
      // with the config file it was given: enqueue needs the same queue and store names
      expect(prune.stderr).toContain(`(from here: memory-warden enqueue prune --config ${resolve(file)} --store sales-bot)`);
      const check = await cliAsync(['check', '--config', file, '--store', 'sales-bot'], env);
      expect(check.stderr).toContain(`(from here: memory-warden enqueue integrity --config ${resolve(file)} --store sales-bot)`);
      const digest = await cliAsync(['run', 'digest', '--config', file, '--store', 'sales-bot'], env);
      expect(digest.stderr).toContain(`(from here: memory-warden enqueue digest --config ${resolve(file)})`);
    });

    // The digest's refusal, the review page and one path held on two machines: of the commands and the fleet, not of the
    // store's kind (each runs once, on the brief's store).
    if (kindName !== 'sqlite×warden') return;

    it('run digest of a fleet config with no smtp section: the fleet refusal, not the mail settings', async () => {
      for (const argv of [['run', 'digest'], ['digest', '--send'], ['run', 'digest', '--store', 'support-bot']]) {
        const { r } = await watched([...argv, '--config', file]);
        expect(r.code).toBe(2);
        expect(r.stderr).toMatch(/^memory-warden: digest: the stores live on several hosts \(box-a, box-b\).*memory-warden enqueue digest\n$/);
        expect(r.stderr).not.toMatch(/smtp/);
      }
    });

    it("the review page: a link to box-b's store opens nothing here and says where its page is", async () => {
      const config = validateConfig({
        stateDb: join(dir, 'a', 'state.db'),
        worker: { host: HERE },
        review: { secretEnv: 'FLEET_TEST_REVIEW_SECRET', auth: { mode: 'password', passwordEnv: 'FLEET_TEST_REVIEW_PASSWORD' }, listen: { host: '127.0.0.1', port: 0 } },
        stores: { 'support-bot': { db: join(dir, 'a', 'memory.db'), host: HERE }, 'sales-bot': { db: there, host: THERE } },
      });
      const saved = { ...process.env };
      Object.assign(process.env, { FLEET_TEST_REVIEW_SECRET: env.FLEET_TEST_REVIEW_SECRET, FLEET_TEST_REVIEW_PASSWORD: 'correct horse battery staple' });
      const server = await startReviewServer({ config, log: silentLogger, now: () => Date.now() });
      const events: string[] = [];
      const watcher = watch(join(dir, 'srv'), (type, name) => events.push(`${type} ${name}`));
      try {
        const before = folder();
        const link = (store: string) => reviewLink({ ...config, review: { ...config.review, url: server.url } }, reviewKey('FLEET_TEST_REVIEW_SECRET'), store, '*', Date.now());
        const away = await fetch(link('sales-bot'));
        expect(away.status).toBe(409);
        expect(await away.text()).toContain(`lives on host ${THERE}`);
        const mine = await fetch(link('support-bot'));
        expect(mine.status).toBe(200);
        await new Promise((resolve) => setTimeout(resolve, 100));
        expect(events).toEqual([]);
        expect(folder()).toEqual(before);
      } finally {
        watcher.close();
        await server.close();
        process.env = saved;
      }
    });

    it('one path held by a store on each machine: --db names the store of this machine, and that one runs', async () => {
      const shared = join(dir, 'shared.yaml');
      writeFileSync(shared, JSON.stringify({
        stateDb: join(dir, 'a', 'state.db'),
        stores: { 'support-bot': { db: there, host: HERE }, 'sales-bot': { db: there, host: THERE } },
      }));
      const r = await cliAsync(['check', '--json', '--config', shared, '--db', there], env);
      expect(r.code, r.stderr).toBe(0);
      expect(r.json()).toMatchObject({ store: 'support-bot' });
      // on box-c neither is this machine's: refused, naming both hosts
      const c = await cliAsync(['run', 'prune', '--config', shared, '--db', there], { ...env, MEMORY_WARDEN_HOST: 'box-c' });
      expect(c.code).toBe(2);
      expect(c.stderr).toMatch(/--db .*support-bot on host box-a, sales-bot on host box-b.*this machine is box-c/);
      expect(countRows(there)).toBe(7);
    });
  });

  describe.each(everywhere)('a %s store lives wherever its database is reached', { timeout: 300_000 }, (kindName) => {
    it('no host can be named for it: the config refuses `host:`, one line naming the setting, exit 2, and its tables are left as they were', async () => {
      const dir = tempDir('fleet-everywhere');
      const kind = await makeKind(kindName, dir, { now: NOW });
      try {
        await kind.add({ text: 'in Oslo this week', user: 'ana', at: NOW - 40 * DAY, expired: true });
        const before = await kind.dump();
        const file = join(dir, 'fleet.yaml');
        writeFileSync(file, JSON.stringify({ stateDb: join(dir, 'state.db'), stores: { 'sales-bot': { ...kind.fileStore, host: THERE } } }));
        for (const argv of [['check'], ['run', 'prune'], ['review', 'delete', 'm1'], ['erase', '--user', 'ana']]) {
          const r = await cliAsync([...argv, '--config', file], { ...kind.env, MEMORY_WARDEN_HOST: HERE });
          expect(r.code, argv.join(' ')).toBe(2);
          const lines = r.stderr.split('\n').filter((l) => l.startsWith('memory-warden:'));
          expect(lines, r.stderr).toEqual([expect.stringMatching(/stores\.sales-bot\.host: .*reachable from every host/)]);
        }
        expect(await kind.dump()).toBe(before);
      } finally {
        await kind.close();
      }
    });
  });
}
