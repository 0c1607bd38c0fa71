import { mkdtempSync, rmSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { validateConfig, type Config } from '../../src/config/config.js';
import { openDatabase, type Db } from '../../src/store/sqlite.js';
import { initSchema } from '../../src/layouts/warden/schema.js';
import { silentLogger } from '../../src/log/logger.js';
import { parseInstant, toCanonical, DAY_MS } from '../../src/time/instants.js';
import type { JobContext } from '../../src/job/job.js';
import { openStateDb } from '../../src/state/state.js';

/** A temp folder with a real memory store (schema of BRIEF.md) and a state db; removed by cleanup(). */
export interface Sandbox {
  dir: string;
  dbPath: string;
  statePath: string;
  now: number;
  cleanup(): void;
}

export const NOW = parseInstant('2026-11-29T06:00:00Z')!;
export const daysAgo = (n: number, now = NOW) => toCanonical(now - n * DAY_MS);

export function sandbox(): Sandbox {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'warden-drift-')));
  const dbPath = join(dir, 'memory.db');
  const db = openDatabase(dbPath, { create: true });
  initSchema(db, dbPath);
  db.close();
  return { dir, dbPath, statePath: join(dir, 'state.db'), now: NOW, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface Row {
  id: string;
  subject?: string;
  fact: string;
  source: string;
  confirmed_at?: string;
  created_at?: string;
  expires_at?: string | null;
  superseded_by?: string | null;
}

export function insertRows(dbPath: string, rows: Row[]): void {
  const db = openDatabase(dbPath);
  try {
    const ins = db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at, expires_at, superseded_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`);
    db.transaction(() => {
      for (const r of rows) {
        const confirmed = r.confirmed_at ?? daysAgo(120);
        ins.run(r.id, r.subject ?? 'user', r.fact, r.source, r.created_at ?? confirmed, confirmed, r.expires_at ?? null, r.superseded_by ?? null);
      }
    })();
  } finally {
    db.close();
  }
}

export function withDb<T>(path: string, fn: (db: Db) => T): T {
  const db = openDatabase(path);
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

export function withState<T>(path: string, fn: (db: Db) => T): T {
  const db = openStateDb(path);
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

export function configFor(box: Sandbox, verify: unknown, extra: Record<string, unknown> = {}): Config {
  return validateConfig({
    stateDb: box.statePath,
    stores: { agent: { db: box.dbPath } },
    verify: { cacheDir: join(box.dir, 'cache'), ...(verify as object) },
    ...extra,
  });
}

export function jobContext(config: Config, now = NOW, signal = new AbortController().signal): JobContext {
  return { config, log: silentLogger, now: () => now, signal };
}

export function row(dbPath: string, id: string): Record<string, unknown> | undefined {
  return withDb(dbPath, (db) => db.prepare(`SELECT * FROM memory WHERE id = ?`).get(id) as Record<string, unknown> | undefined);
}

export function liveIds(dbPath: string): string[] {
  return withDb(dbPath, (db) => (db.prepare(`SELECT id FROM live_memory ORDER BY id`).all() as { id: string }[]).map((r) => r.id));
}
