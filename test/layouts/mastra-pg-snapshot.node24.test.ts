import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import pg from 'pg';
import { tempDir } from '../helpers/store.js';
import { CLI, cliAsync as cli } from '../helpers/cli.js';
import { mastraSdk, type MastraSdk } from '../helpers/mastra-sdk.js';
import { createTestDatabase, startPgvectorServer, type PgvectorServer, type TestDatabase } from '../helpers/pg.js';
import { pgRows as rows, VEC_TABLE } from '../helpers/mastra-pg.js';
import { verifyBytesGone } from '../../src/engines/postgres/bytes.js';
import { loadConfig } from '../../src/config/config.js';
import { assertSnapshotsTake, takeSnapshot } from '../../src/snapshot/create.js';
import { readManifest } from '../../src/snapshot/manifest.js';
import { holdsContain, idMac, snapshotHolds } from '../../src/snapshot/targets/holds.js';
import { eraseKey } from '../../src/erase/key.js';
import { silentLogger } from '../../src/log/logger.js';

// Mastra's SDK on two servers, one of them PGlite (one backend for every client): each step waits on the other
// files' work on a loaded machine; a budget per test and hook, not a figure.
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/**
 * Snapshot and restore of Mastra's split form, built with Mastra's own Agent and Memory: PostgresStore on the native
 * PostgreSQL 15 (no pgvector), PgVector on PGlite (`mastra.pgvector.url`). The snapshot reads PgVector's tables, then
 * the store's; an agent writes and deletes between the two reads, and what that leaves is named. The holds name the
 * ids only the vectors' metadata still names. A restore killed -9 between its two parts is finished by the next; the
 * erase ledger is re-applied to both servers (read back byte by byte), and Mastra reads, recalls and writes after.
 */
const PG_KILL_AT = fileURLToPath(new URL('../helpers/pg-kill-at.cjs', import.meta.url));

/** The CLI killed -9 before the nth statement to PostgreSQL matching `sql` (test/helpers/pg-kill-at.cjs). */
function killedAt(args: string[], env: Record<string, string>, at: { sql: string; nth: number }): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, ...env, LOG_LEVEL: 'silent', NODE_OPTIONS: `--require ${PG_KILL_AT}`, MW_PG_KILL_AT: JSON.stringify({ ...at, when: 'before' }) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal, stderr })));
}

/**
 * Runs `between` when the nth one-instant read (snapshot.ts's `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`)
 * is about to start, and records the port each one was sent to: which server was read first.
 */
function atRead(nth: number, between: () => Promise<void>): { ports: number[]; restore(): void } {
  const query = pg.Client.prototype.query;
  const ports: number[] = [];
  pg.Client.prototype.query = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
    if (config === 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY') {
      ports.push(Number((this as any).connectionParameters.port));
      if (ports.length === nth) return between().then(() => (query as any).call(this, config, ...rest));
    }
    return (query as any).call(this, config, ...rest);
  } as typeof query;
  return { ports, restore: () => { pg.Client.prototype.query = query; } };
}

describe('Mastra on @mastra/pg, split form: snapshot and restore', () => {
  const tmp = tempDir('mw-mastra-pg-snap-');
  let vec: PgvectorServer;
  let db: TestDatabase;
  let sdk: () => Promise<MastraSdk>;
  let env: Record<string, string>;
  let configFile: string;
  beforeAll(async () => {
    vec = await startPgvectorServer();
    db = await createTestDatabase('mw_mastra_snap');
    configFile = join(tmp.dir, 'memory-warden.yaml');
    writeFileSync(configFile, JSON.stringify({
      stateDb: join(tmp.dir, 'state.db'), snapshot: { root: join(tmp.dir, 'backups') },
      stores: { s: { engine: 'postgres', layout: 'mastra', postgres: { url: '${MW_MASTRA_PG}', schema: 'public' }, mastra: { pgvector: { url: '${MW_MASTRA_VEC}' } } } },
    }));
    env = { MW_MASTRA_PG: db.url, MW_MASTRA_VEC: vec.url };
    sdk = () => mastraSdk('', 'resource', { pg: { storeUrl: db.url, vectorUrl: vec.url } });
  });
  afterAll(async () => {
    await vec?.stop();
    await db?.drop();
    tmp.cleanup();
  });

  it('refuses, in one line naming the field, the forms it cannot take apart: another schema without a url, a url naming the store\'s own schema', async () => {
    const store = (pgvector: Record<string, string>) => loadConfig({ env: { U: 'postgres://h/db', V: 'postgres://h/db' }, overrides: {
      stores: { s: { engine: 'postgres', layout: 'mastra', postgres: { url: '${U}', schema: 'mem' }, mastra: { pgvector } } },
    } }).stores.s!;
    await expect(assertSnapshotsTake('s', store({ schema: 'vectors' }))).rejects.toThrow(/^config: stores\.s\.mastra\.pgvector\.schema: [^\n]+$/);
    await expect(assertSnapshotsTake('s', store({ url: '${V}', schema: 'mem' }))).rejects.toThrow(/^config: stores\.s\.mastra\.pgvector\.url: [^\n]+$/);
    await expect(assertSnapshotsTake('s', store({ url: '${V}' }))).resolves.toBeUndefined();
    await expect(assertSnapshotsTake('s', store({ schema: 'mem' }))).resolves.toBeUndefined();
  });

  it('vectors then tables, holds from both, restore killed between its parts finished with the ledger on both servers', async () => {
    const run = (...args: string[]) => cli([...args, '--config', configFile, '--store', 's', '--json'], env);
    const s = await sdk();
    const ana = await s.thread('ana', ['Ana Quintero banks at Nordea', 'Ana Quintero moved to Oslo']);
    await s.workingMemory('ana', ana.threadId, '# Ana\n- account NORDEA-7781');
    const ben = await s.thread('ben', ['Ben Okafor reads poetry', 'Ben Okafor plays chess']);
    await s.workingMemory('ben', ben.threadId, '# Ben\n- reads poetry');
    await s.agentTurn('ben', ben.threadId, 'What does Ben Okafor read?', 'Ben Okafor reads poetry');
    await s.close();
    const init = await run('init');
    expect(init.code, init.stderr).toBe(0);

    // Between the vectors' read and the store's, an agent deletes one of Ben's messages and Cleo writes her first.
    let cleo: { threadId: string; messageIds: string[] } | undefined;
    const config = loadConfig({ file: configFile, env });
    const hook = atRead(2, async () => {
      const a = await sdk();
      try {
        await a.memory.deleteMessages([ben.messageIds[0]]);
        cleo = await a.thread('cleo', ['Cleo Park grows tomatoes']);
      } finally {
        await a.close();
      }
    });
    let dir: string;
    try {
      dir = (await takeSnapshot(config, 's', { now: () => Date.now(), log: silentLogger })).dir;
    } finally {
      hook.restore();
    }
    expect(hook.ports).toEqual([vec.port, Number(new URL(db.url).port)]);
    const manifest = readManifest(dir);
    expect(manifest.vectorTables).toMatchObject({ dir: 'pgvector', tables: { [VEC_TABLE]: 6 } });
    expect(Date.parse(manifest.vectorTables!.takenAt)).toBeLessThanOrEqual(Date.parse(manifest.tables!.takenAt));
    expect(manifest.tables!.tables).toMatchObject({ mastra_messages: 6 }); // one deleted, one written between
    // The holds name the ids only the vectors' metadata still names (Ben's deleted message), and the store's.
    const key = eraseKey(config);
    for (const id of [ben.messageIds[0]!, cleo!.messageIds[0]!, ana.threadId]) {
      expect(await holdsContain(snapshotHolds(dir, manifest, key), { ids: new Set([idMac(key, id)]) }, dir), id).toBe(true);
    }

    // Ana is erased from the live store; then the snapshot, which holds her, is restored.
    const erase = await run('erase', '--user', 'ana');
    expect(erase.json().bytes.verdict, erase.stderr).toBe('clean');
    // The snapshot holds her (its holds say so): erase names it, and exits 1 while it is kept.
    expect(erase.json().snapshots.found).toEqual([dir]);
    expect(erase.code).toBe(1);
    await rows(db.url, `INSERT INTO mastra_threads (id, "resourceId", title, metadata, "createdAt", "updatedAt") VALUES ('later', 'ben', 'after the snapshot', '{}', now(), now())`);
    // Killed after PgVector's tables are the snapshot's (Ana's embeddings back), before the store's restore starts.
    const killed = await killedAt(['restore', dir, '--config', configFile, '--store', 's', '--json'], env, { sql: 'pg_advisory_xact_lock\\(hashtext', nth: 2 });
    expect(killed.signal ?? killed.code, killed.stderr).not.toBe(0);
    expect((await rows(vec.url, `SELECT 1 FROM ${VEC_TABLE} WHERE metadata->>'resource_id' = 'ana'`)).length).toBe(2);
    expect(await rows(db.url, `SELECT id FROM mastra_threads WHERE id = 'later'`)).toHaveLength(1);
    const pending = await run('check');
    expect(pending.json().problems.map((p: { code: string }) => p.code)).toContain('restore_pending');

    const done = await run('restore', dir);
    expect(done.code, done.stderr + done.stdout).toBe(0);
    const result = done.json();
    expect(existsSync(join(result.undo, 'pgvector', 'manifest.json'))).toBe(true); // the undo snapshot holds both parts
    expect(JSON.stringify(result.steps)).toContain('finishing the restore');
    expect(await rows(db.url, `SELECT id FROM mastra_threads WHERE id = 'later'`)).toEqual([]);
    // Ana stays erased on both servers: no row, and no byte of her in either server's relation files.
    expect(await rows(db.url, `SELECT id FROM mastra_threads WHERE "resourceId" = 'ana'`)).toEqual([]);
    expect(await rows(vec.url, `SELECT 1 FROM ${VEC_TABLE} WHERE metadata->>'resource_id' = 'ana'`)).toEqual([]);
    const needles = ['Ana Quintero banks at Nordea', 'Ana Quintero moved to Oslo', 'NORDEA-7781', ana.threadId];
    for (const [url, tables] of [[db.url, ['mastra_threads', 'mastra_messages', 'mastra_resources']], [vec.url, [VEC_TABLE]]] as const) {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      try {
        expect((await verifyBytesGone(c, { schema: 'public', tables, needles })).found, url).toEqual([]);
      } finally {
        await c.end();
      }
    }

    // What the agent did between the two reads: Cleo's message without its embedding (Mastra reads it, recall cannot
    // find it), Ben's deleted message's embedding without its message, which check names.
    expect(await rows(db.url, `SELECT 1 FROM mastra_messages WHERE id = $1`, [cleo!.messageIds[0]])).toHaveLength(1);
    expect(await rows(vec.url, `SELECT 1 FROM ${VEC_TABLE} WHERE metadata->>'message_id' = $1`, [cleo!.messageIds[0]])).toEqual([]);
    const check = await run('check');
    expect(check.json().problems.map((p: { code: string; count: number }) => [p.code, p.count])).toEqual([['mastra_embedding_without_message', 1]]);
    const orphan = check.json().problems[0].ids as string[];
    expect((await rows(vec.url, `SELECT metadata->>'message_id' AS m FROM ${VEC_TABLE} WHERE vector_id = ANY($1::text[])`, [orphan])).map((r) => r.m)).toEqual([ben.messageIds[0]]);

    const m = await sdk();
    try {
      expect((await m.memory.listThreads({ filter: { resourceId: 'ben' } })).threads.map((t: { id: string }) => t.id)).toEqual([ben.threadId]);
      expect((await m.memory.listThreads({ filter: { resourceId: 'ana' } })).threads).toEqual([]);
      const { messages } = await m.memory.recall({ threadId: ben.threadId, resourceId: 'ben', perPage: false });
      expect(JSON.stringify(messages)).toContain('Ben Okafor plays chess');
      expect(messages.map((x: { id: string }) => x.id)).not.toContain(ben.messageIds[0]);
      expect(JSON.stringify((await m.memory.recall({ threadId: cleo!.threadId, resourceId: 'cleo', perPage: false })).messages)).toContain('Cleo Park grows tomatoes');
      expect(await m.resourceWorkingMemory('ben')).toContain('reads poetry');
      expect(await m.resourceWorkingMemory('ana')).toBeNull();
      expect(await m.recall('ben', ben.threadId, 'Ben Okafor chess')).toContain('Ben Okafor plays chess');
      await m.agentTurn('ben', ben.threadId, 'Ben Okafor sails on Sundays', 'Noted');
      expect(await m.recall('ben', ben.threadId, 'sails Sundays')).toContain('Ben Okafor sails on Sundays');
    } finally {
      await m.close();
    }
    expect(readFileSync(join(dir, 'manifest.json'), 'utf8')).toContain('"vectorTables"');
  });
});
