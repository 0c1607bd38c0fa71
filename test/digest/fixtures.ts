import { join } from 'node:path';
import { JOBS } from '../../jobs/index.js';
import { validateConfig, type Config } from '../../src/config/config.js';
import type { JobContext } from '../../src/job/job.js';
import { silentLogger } from '../../src/log/logger.js';
import { runJob } from '../../src/job/runner.js';
import { openStateDb } from '../../src/state/state.js';
import { deliveries, type Delivery } from '../../src/digest/deliveries.js';
import type { DigestResult } from '../../src/digest/digest.js';
import { makeStore, type Row } from '../helpers/store.js';
import type { TestSmtp } from '../helpers/smtp.js';

export const NOW = Date.parse('2026-11-29T06:00:00Z');
export const HOUR = 3_600_000;
export const DAY = 24 * HOUR;

/** Canonical text of an instant: what an agent's datetime('now') would have written then. */
export const at = (ms: number) => new Date(ms).toISOString().slice(0, 19).replace('T', ' ');

export interface World {
  dir: string;
  config: Config;
  storePath(name: string): string;
}

/** Stores (each a real SQLite file with these rows) and a config pointing at them, the SMTP server and a temp state db. */
export function world(dir: string, stores: Record<string, Row[]>, smtp: TestSmtp | null, digest: Record<string, unknown> = {}, extra: Record<string, unknown> = {}): World {
  const storeConf: Record<string, { db: string }> = {};
  for (const [name, rows] of Object.entries(stores)) storeConf[name] = { db: makeStore(join(dir, `${name}.db`), rows) };
  const config = validateConfig({
    stateDb: join(dir, 'state.db'),
    stores: storeConf,
    ...(smtp ? { smtp: smtp.config() } : {}),
    digest: { to: ['owner@example.org'], from: 'memory-warden <warden@example.org>', ...digest },
    ...extra,
  });
  return { dir, config, storePath: (name) => join(dir, `${name}.db`) };
}

export function runDigestJob(config: Config, now: number, payload: unknown = {}): Promise<DigestResult> {
  return runJob('digest', payload, { jobs: JOBS, config, log: silentLogger, now: () => now }) as Promise<DigestResult>;
}

export function ctx(config: Config, now: number): JobContext {
  return { config, log: silentLogger, now: () => now, signal: new AbortController().signal };
}

export function stateRows(config: Config): Delivery[] {
  const db = openStateDb(config.stateDb);
  try {
    return deliveries(db);
  } finally {
    db.close();
  }
}

export function withState<T>(config: Config, fn: (db: ReturnType<typeof openStateDb>) => T): T {
  const db = openStateDb(config.stateDb);
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

/** `n` plain rows created at one-minute steps before `end`, ids m_0001…, newest last. */
export function rowsBefore(end: number, n: number, prefix = 'm_', start = 1): Row[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `${prefix}${String(start + i).padStart(4, '0')}`,
    subject: 'project',
    fact: `plain fact number ${start + i}`,
    source: 'user message',
    created_at: at(end - (n - i) * 60_000),
  }));
}
