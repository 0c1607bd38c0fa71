import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import YAML from 'yaml';
import { escapedLine } from '../src/text/untrusted.js';
import { MANIFEST_FORMAT } from '../src/snapshot/manifest.js';
import { openQueue } from '../src/queue/queues.js';
import { loadConfig } from '../src/config/config.js';
import { cli } from './helpers/cli.js';
import { runMain } from './helpers/main.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from './helpers/redis.js';
import { makeStore, tempDir } from './helpers/store.js';
import { FORGED, RAW, TERMINAL_PAYLOADS } from './helpers/terminal-payloads.js';

/**
 * Not only store text is hostile: a path in the config or on the command line, a column of the state db, a value
 * in Redis (a heartbeat, a last success, a job scheduler's id) and a remote snapshot's manifest are text that
 * someone else wrote. Each value in a human-readable line is shown on its own (`\uXXXX` for every hidden
 * character, the newline too), so none drives the terminal or forges a line; `--json` gives back the exact value.
 */

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
}, 60_000);
afterAll(() => redis?.stop());

/** A store, its snapshot root and a local snapshot target, all in a folder whose name holds `payload`. */
function world(payload: string) {
  const tmp = tempDir('mw-values-');
  const place = join(tmp.dir, `x${payload}`);
  mkdirSync(join(place, 'remote'), { recursive: true });
  const db = makeStore(join(place, 'agent.db'), [{ id: 'ada', subject: 'ada', fact: 'ada likes tea' }]);
  const prefix = uniquePrefix('terminal-values');
  const raw = {
    stateDb: join(tmp.dir, 'state.db'),
    stores: { agent: { db } },
    snapshot: { root: join(place, 'snaps'), targets: [{ type: 'local', name: 'off', path: join(place, 'remote') }] },
    redis: { url: redis.url, prefix },
  };
  const config = join(tmp.dir, 'warden.yaml');
  writeFileSync(config, YAML.stringify(raw));
  const remote = join(place, 'remote', 'agent');
  return { tmp, place, db, config, prefix, remote, stateDb: raw.stateDb, at: ['--config', config, '--store', 'agent'] };
}

/**
 * No raw control, format or separator character, no forged line; and `payload` shown as the per-value sanitiser
 * shows it, in the line that `line` picks out.
 */
function expectShown(r: { stdout: string; stderr: string }, payload: string, what: string, line: RegExp): void {
  expect(r.stdout + r.stderr, what).not.toMatch(RAW);
  expect(r.stdout + r.stderr, what).not.toMatch(FORGED);
  const lines = r.stdout.split('\n').filter((l) => line.test(l));
  expect(lines, what).toHaveLength(1);
  expect(lines[0], what).toContain(escapedLine(payload));
}

describe.each(Object.entries(TERMINAL_PAYLOADS))('values holding %s', { timeout: 60_000 }, (_, payload) => {
  let w: ReturnType<typeof world>;
  let snapshotDir: string;
  beforeAll(async () => {
    vi.stubEnv('LOG_LEVEL', 'silent');
    vi.stubEnv('MEMORY_WARDEN_CONFIG', '');
    w = world(payload);
    const taken = await runMain(['run', 'snapshot', ...w.at, '--now', '2026-11-29T02:00:00Z', '--json']);
    expect(taken.code, taken.stderr).toBe(0);
    snapshotDir = JSON.parse(taken.stdout).dir;
    // The target's copy says something of its own, and a second one there is not a snapshot manifest at all.
    const manifest = join(w.remote, '2026-11-29T020000Z', 'manifest.json');
    writeFileSync(manifest, JSON.stringify({ ...JSON.parse(readFileSync(manifest, 'utf8')), reason: `why${payload}` }));
    mkdirSync(join(w.remote, '2026-11-30T020000Z'));
    writeFileSync(join(w.remote, '2026-11-30T020000Z', 'manifest.json'), JSON.stringify({
      format: MANIFEST_FORMAT, sqlite: {}, qdrant: [], files: { [`f${payload}`]: {} }, remote: { format: 'memory-warden-remote/1', objects: {} },
    }));
  });
  afterAll(async () => {
    vi.unstubAllEnvs();
    w.tmp.cleanup();
    await deletePrefix(redis.client, w.prefix);
  });

  it('init --db PATH --create', async () => {
    const r = await runMain(['init', '--db', join(w.place, 'new.db'), '--create']);
    expect(r.code, r.stderr).toBe(0);
    expectShown(r, payload, 'init', /: created table memory;/);
    expect(r.stdout.split('\n')).toHaveLength(2);
  });

  it('snapshots list: the snapshot root', async () => {
    const r = await runMain(['snapshots', 'list', ...w.at]);
    expect(r.code, r.stderr).toBe(0);
    expectShown(r, payload, 'snapshots list', /^agent: 1 snapshot\(s\) in /);
    expect(JSON.parse((await runMain(['snapshots', 'list', ...w.at, '--json'])).stdout).dir).toBe(join(w.place, 'snaps', 'agent'));
  });

  it("snapshots list --target and snapshots verify: the target's place and what its manifests say", async () => {
    for (const argv of [['snapshots', 'list', ...w.at, '--target', 'off'], ['snapshots', 'verify', ...w.at, '--target', 'off']]) {
      const r = await runMain(argv);
      expect(r.code, r.stderr).toBe(1); // the second manifest is not usable
      expectShown(r, payload, argv.join(' '), /^agent: 2 snapshot\(s\) on target off \(/);
      expect(r.stdout).toContain(`why${escapedLine(payload)}`);
      expect(r.stdout).toContain(`file entry "f${escapedLine(payload)}"`);
    }
    const json = JSON.parse((await runMain(['snapshots', 'list', ...w.at, '--target', 'off', '--json'])).stdout);
    expect(json.where).toBe(w.remote);
    expect(json.snapshots[0].reason).toBe(`why${payload}`);
  });

  it("snapshots push: the target's place", async () => {
    const r = await runMain(['snapshots', 'push', ...w.at]);
    expect(r.code, r.stderr).toBe(0);
    expectShown(r, payload, 'snapshots push', /^agent → off \(/);
  });

  it('restore DIR --dry-run: the folder restored from', async () => {
    const r = await runMain(['restore', snapshotDir, ...w.at, '--dry-run']);
    expect(r.code, r.stderr).toBe(0);
    expectShown(r, payload, 'restore --dry-run', /^agent: dry run of restore from /);
    expect(JSON.parse((await runMain(['restore', snapshotDir, ...w.at, '--dry-run', '--json'])).stdout).from).toBe(snapshotDir);
  });

  it('erase --dry-run: the snapshot folder that still holds the person', async () => {
    const r = await runMain(['erase', ...w.at, '--user', 'ada', '--dry-run']);
    expect(r.code, r.stderr).toBe(0);
    expectShown(r, payload, 'erase --dry-run', /^ {2}snapshot still contains it: \//);
  });

  it('restore DIR: the pre-restore snapshot to undo it with', async () => {
    const r = await runMain(['restore', snapshotDir, ...w.at, '--now', '2026-11-29T03:00:00Z']);
    expect(r.code, r.stderr).toBe(0);
    expectShown(r, payload, 'restore', /^ {2}to undo: memory-warden restore /);
    expect(r.stdout).toMatch(/^ {2}to undo: memory-warden restore .*-pre-restore --config \S+warden\.yaml --store agent$/m);
  });

  it('erase receipts: what the state db holds', async () => {
    expect((await runMain(['erase', ...w.at, '--user', 'ada', '--now', '2026-11-29T04:00:00Z'])).code).toBe(1);
    const state = new Database(w.stateDb);
    state.prepare('UPDATE erase_receipts SET erased_at = ?, store = ?, layout = ?, counts = ?')
      .run(`2026${payload}`, `agent${payload}`, `warden${payload}`, JSON.stringify({ rows: payload }));
    state.prepare('UPDATE erase_receipt_places SET place = ? WHERE rowid = (SELECT min(rowid) FROM erase_receipt_places)').run(`files:${payload}`);
    state.close();
    const r = await runMain(['erase', 'receipts', '--config', w.config]);
    expect(r.code, r.stderr).toBe(0);
    expectShown(r, payload, 'erase receipts', /^#1 /);
    // (places is JSON text that SQLite made: its escapes for C0 controls are its own, and it carries the rest raw.)
    for (const value of [`2026${payload}`, `agent${payload}`, `warden${payload}`]) expect(r.stdout).toContain(escapedLine(value));
    expect(r.stdout.split('\n')).toHaveLength(2);
    expect(JSON.parse((await runMain(['erase', 'receipts', '--config', w.config, '--json'])).stdout)[0].store).toBe(`agent${payload}`);
  });

  it("fleet: a host's heartbeat and a job's last success, from Redis", async () => {
    const beat = { host: 'h1', version: `1.0${payload}`, pid: `7${payload}`, startedAt: '2026-11-29T00:00:00Z', lastSeen: `2026${payload}`, stores: [`s${payload}`] };
    await redis.client.hset(`${w.prefix}:fleet:hosts`, 'h1', JSON.stringify(beat));
    await redis.client.hset(`${w.prefix}:fleet:last-success`, 'integrity', `then${payload}`);
    const r = await runMain(['fleet', '--config', w.config]);
    // its time does not parse: silent, and the text it carries is shown escaped (a pid that is no number is not shown)
    expectShown(r, payload, 'fleet', /^h1 {2}SILENT/);
    for (const value of [beat.version, beat.lastSeen, beat.stores[0]!]) expect(r.stdout).toContain(escapedLine(value));
    expect(JSON.parse((await runMain(['fleet', '--config', w.config, '--json'])).stdout).hosts[0].version).toBe(beat.version);
  });

  it("schedule: a job scheduler's id, from Redis", async () => {
    const queue = openQueue(loadConfig({ file: w.config }), redis.client);
    await queue.upsertJobScheduler(`prune${payload}`, { every: 60_000 }, { name: 'prune', data: { store: 'agent' } });
    await queue.close();
    const r = await runMain(['schedule', '--config', w.config]);
    expect(r.code, r.stderr).toBe(0);
    expectShown(r, payload, 'schedule', /^prune(?!:agent)/);
  });
});

describe('the built command line', () => {
  it('shows a path from the command line on one line', () => {
    const tmp = tempDir('mw-values-');
    try {
      for (const payload of [TERMINAL_PAYLOADS['a newline and a forged line']!, TERMINAL_PAYLOADS['OSC 52 clipboard write']!, TERMINAL_PAYLOADS['RLO (U+202E)']!]) {
        const db = join(tmp.dir, `new${payload}.db`);
        const r = cli(['init', '--db', db, '--create'], { MEMORY_WARDEN_CONFIG: '' });
        expect(r.code, r.stderr).toBe(0);
        expectShown(r, payload, 'init', /: created table memory;/);
        expect(r.stdout.split('\n')).toHaveLength(2);
      }
    } finally {
      tmp.cleanup();
    }
  });
});
