import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import YAML from 'yaml';
import { CLI } from './helpers/cli.js';
import { ids, makeStore, type Row } from './helpers/store.js';
import { qdrantFixture, type QdrantFixture } from './helpers/qdrant-store.js';

/**
 * `--db PATH` with a config file names a store by its file, not by its file name: the configured store that holds
 * the file runs with its settings (its Qdrant collections, so a prune takes the rows' points too), and a file
 * named like a configured store of another file is refused (its collections, snapshots and records are not this
 * file's). Before, the file name decided: the first ran as a bare store and left the points, the second ran with
 * the other store's collections.
 */
const NOW = '2026-12-01T00:00:00Z';
const ROWS: Row[] = [
  { id: 'gone1', expires_at: '2020-01-01 00:00:00' },
  { id: 'gone2', expires_at: '2021-06-01 00:00:00' },
  { id: 'live1' },
  { id: 'live2' },
];
const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');

describe('--db with a config file', () => {
  let fx: QdrantFixture;
  let config: string;
  beforeAll(async () => {
    fx = await qdrantFixture(ROWS);
    config = fx.configFile();
  });
  afterAll(async () => fx?.close());

  /** A fresh store file holding ROWS, with a point per row in the configured collection. */
  async function reset(): Promise<void> {
    const collection = fx.collections[0]!;
    const points = (await fx.q.points(collection)).map((p) => p.id);
    if (points.length > 0) {
      const res = await fetch(`${fx.q.url}/collections/${encodeURIComponent(collection)}/points/delete?wait=true`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(fx.q.apiKey ? { 'api-key': fx.q.apiKey } : {}) },
        body: JSON.stringify({ points }),
      });
      expect(res.ok).toBe(true);
    }
    makeStoreAt(fx.dbPath);
    await fx.seedPoints(ROWS);
  }

  it('the configured store that holds the file runs, with its vectors: by its path, a link, a relative path from elsewhere', async () => {
    const link = join(fx.dir, 'link-to-memory.db');
    symlinkSync(fx.dbPath, link);
    const elsewhere = join(fx.dir, 'cwd', 'deeper');
    mkdirSync(elsewhere, { recursive: true });
    for (const [how, db, cwd] of [['path', fx.dbPath, undefined], ['link', link, undefined], ['relative', relative(elsewhere, fx.dbPath), elsewhere]] as const) {
      await reset();
      expect(await fx.pointRows(), how).toEqual(['gone1', 'gone2', 'live1', 'live2']);
      const r = await run(['run', 'prune', '--now', NOW, '--json', '--config', config, '--db', db], cwd);
      expect(r.code, `${how}: ${r.stderr}`).toBe(0);
      expect(r.json()).toMatchObject({ store: 'agent', deleted: 2 });
      expect(ids(fx.dbPath), how).toEqual(['live1', 'live2']);
      expect(await fx.pointRows(), how).toEqual(['live1', 'live2']);
    }
  });

  it('check by --db reports as that store (with its vector side checked)', async () => {
    await reset();
    const r = await run(['check', '--json', '--now', NOW, '--config', config, '--db', fx.dbPath]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ store: 'agent' });
    expect(r.json().vectors.collections.map((c: { collection: string }) => c.collection)).toEqual(fx.collections);
  });

  it('a file named like a configured store of another file is refused, and nothing is touched', async () => {
    await reset();
    const copyDir = join(fx.dir, 'copies');
    mkdirSync(copyDir, { recursive: true });
    for (const name of ['agent.db', 'agent.sqlite', 'agent']) {
      const copy = join(copyDir, name);
      copyFileSync(fx.dbPath, copy);
      const before = sha(copy);
      for (const args of [['run', 'prune', '--now', NOW], ['erase', '--user', 'user', '--now', NOW], ['run', 'snapshot', '--now', NOW], ['check']]) {
        const r = await run([...args, '--config', config, '--db', copy]);
        expect(r.code, `${name} ${args[1]}`).toBe(2);
        expect(r.stderr).toBe(`memory-warden: --db ${copy}: config ${config} has a store named agent for another file (${fx.dbPath}); give --store agent for that one, or leave the config out for this file\n`);
        expect(sha(copy)).toBe(before);
      }
    }
    expect(await fx.pointRows()).toEqual(['gone1', 'gone2', 'live1', 'live2']);
    expect(ids(fx.dbPath)).toEqual(['gone1', 'gone2', 'live1', 'live2']);
  });

  it('a file the config does not hold is a store of its own, with no vector side', async () => {
    await reset();
    const other = join(fx.dir, 'other.db');
    makeStore(other, ROWS);
    const r = await run(['run', 'prune', '--now', NOW, '--json', '--config', config, '--db', other]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ store: 'other', deleted: 2 });
    expect(ids(other)).toEqual(['live1', 'live2']);
    expect(await fx.pointRows()).toEqual(['gone1', 'gone2', 'live1', 'live2']);
  });

  it('--store and --db must name the same store', async () => {
    await reset();
    const other = join(fx.dir, 'other2.db');
    makeStore(other, ROWS);
    const same = await run(['check', '--json', '--now', NOW, '--config', config, '--store', 'agent', '--db', fx.dbPath]);
    expect(same.code, same.stderr).toBe(0);
    expect(same.json().store).toBe('agent');
    for (const [args, file] of [
      [['--config', config, '--store', 'agent', '--db', other], 'other2'],
      [['--store', 'agent', '--db', other], 'other2'],
      [['--store', 'other', '--db', fx.dbPath, '--config', config], 'agent'],
    ] as const) {
      const before = sha(other);
      const r = await run(['run', 'prune', '--now', NOW, ...args]);
      expect(r.code).toBe(2);
      const store = args[args.indexOf('--store') + 1];
      const db = args[args.indexOf('--db') + 1];
      expect(r.stderr).toBe(`memory-warden: --store ${store} and --db ${db}: two different stores (that file is ${file}); give one of them\n`);
      expect(sha(other)).toBe(before);
    }
    expect(ids(fx.dbPath)).toEqual(['gone1', 'gone2', 'live1', 'live2']);
  });

  it('a stores key written with escapes is still read as stores (a file named like one of them is refused)', async () => {
    const escaped = join(fx.dir, 'escaped.yaml');
    const raw = fx.raw();
    const { stores, ...rest } = raw;
    writeFileSync(escaped, `${YAML.stringify(rest)}"st\\x6fres": ${JSON.stringify(stores)}\n`);
    expect(readFileSync(escaped, 'utf8')).not.toContain('stores');
    const copy = join(fx.dir, 'copies', 'agent.db');
    mkdirSync(join(fx.dir, 'copies'), { recursive: true });
    copyFileSync(fx.dbPath, copy);
    const before = sha(copy);
    const r = await run(['run', 'prune', '--now', NOW, '--config', escaped, '--db', copy]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('has a store named agent for another file');
    expect(sha(copy)).toBe(before);
    const held = await run(['check', '--json', '--now', NOW, '--config', escaped, '--db', fx.dbPath]);
    expect(held.json().store).toBe('agent');
  });

  it('a config that holds the file as two stores is refused', async () => {
    const raw = fx.raw();
    const stores = raw.stores as Record<string, unknown>;
    const twice = join(fx.dir, 'twice.yaml');
    writeFileSync(twice, YAML.stringify({ ...raw, stores: { ...stores, again: { db: fx.dbPath } } }));
    const r = await run(['check', '--config', twice, '--db', fx.dbPath]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`memory-warden: --db ${fx.dbPath}: config ${twice} holds this file as several stores (agent, again); give --store NAME instead\n`);
  });

  it('the digest shows a configured file once, under its store', async () => {
    await reset();
    const r = await run(['digest', '--preview', '--json', '--now', NOW, '--config', config, '--db', fx.dbPath]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().model.stores.map((s: { name: string }) => s.name)).toEqual(['agent']);
  });

  /** ROWS written over `path` (the fixture's store), WAL and all. */
  function makeStoreAt(path: string): void {
    for (const suffix of ['', '-wal', '-shm']) rmSync(path + suffix, { force: true });
    makeStore(path, ROWS);
  }
});

/**
 * The CLI from `cwd` (default: this process's), without blocking this process: the Qdrant test server the child
 * talks to runs here.
 */
function run(args: string[], cwd?: string): Promise<{ code: number; stdout: string; stderr: string; json(): any }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd, env: { ...process.env, LOG_LEVEL: 'silent' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr, json: () => JSON.parse(stdout) }));
  });
}
