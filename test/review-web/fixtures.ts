import { afterAll, beforeAll } from 'vitest';
import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import Database from 'better-sqlite3';
import { validateConfig, type Config } from '../../src/config/config.js';
import { silentLogger, type Logger } from '../../src/log/logger.js';
import { openStateDb } from '../../src/state/state.js';
import { recordVerdict } from '../../src/drift/record.js';
import { startReviewServer, type ReviewServer, type ReviewServerOptions } from '../../src/review-web/server.js';
import { makeStore, type Row } from '../helpers/store.js';
import { DAY_MS, parseInstant, toCanonical } from '../../src/time/instants.js';

export const NOW = parseInstant('2026-11-29T06:00:00Z')!;
export const daysAgo = (n: number) => toCanonical(NOW - n * DAY_MS);
export const KEY_ENV = 'MW_TEST_REVIEW_WEB_KEY';
export const PASSWORD_ENV = 'MW_TEST_REVIEW_WEB_PASSWORD';
export const PASSWORD = 'correct horse battery staple';
process.env[KEY_ENV] = 'k'.repeat(16) + Math.random().toString(36).repeat(4);
process.env[PASSWORD_ENV] = PASSWORD;

/** The system Chromium, headless, with its own fresh profile (playwright makes a temp user-data-dir per launch). */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** Opens a link in the browser and signs in with the shared password, up to the store's page. */
export async function signIn(page: Page, link: string, user = 'alice'): Promise<void> {
  await page.goto(link);
  await page.fill('input[name=user]', user);
  await page.fill('input[name=password]', PASSWORD);
  await page.click('button[type=submit]');
  await page.waitForSelector('h1:has-text("Review agent")');
}

/** One Chromium for a test file: launched before its tests, closed after them. */
export function browserForFile(): () => Browser {
  let browser: Browser | undefined;
  beforeAll(async () => {
    browser = await launchChromium();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });
  return () => browser!;
}

/** A form's hidden fields, name → value, as the browser would post them. */
export async function hiddenFields(form: Locator): Promise<Record<string, string>> {
  const inputs = await form.locator('input[type=hidden]').all();
  return Object.fromEntries(await Promise.all(inputs.map(async (i) => [(await i.getAttribute('name')) ?? '', await i.inputValue()])));
}

export interface Site {
  dir: string;
  dbPath: string;
  statePath: string;
  configFile: string;
  /** The config the server runs with; `review.url` is the server's own address. */
  config: Config;
  server: ReviewServer;
  url: string;
  clock: { now: number };
  close(): Promise<void>;
}

/**
 * A real store and state db in a temp folder, a memory-warden config file naming them, and the review server on
 * loopback with an adjustable clock. `waiting` rows get a drift verdict that needs a person.
 */
export async function startSite(opts: {
  rows: Row[]; waiting?: string[]; review?: Record<string, unknown>; stores?: Record<string, Row[]>;
  log?: Logger; timeouts?: ReviewServerOptions['timeouts'];
}): Promise<Site> {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'mw-review-web-')));
  const dbPath = makeStore(join(dir, 'agent.db'), opts.rows);
  const statePath = join(dir, 'state.db');
  const stores: Record<string, { db: string }> = { agent: { db: dbPath } };
  for (const [name, rows] of Object.entries(opts.stores ?? {})) stores[name] = { db: makeStore(join(dir, `${name}.db`), rows) };
  const state = openStateDb(statePath);
  for (const id of opts.waiting ?? []) {
    recordVerdict(state, { store: 'agent', memoryId: id, verdict: 'unverifiable', evidence: { reason: 'no rule reads this source' }, checkedAt: NOW - DAY_MS, needsPerson: true });
  }
  state.close();
  const clock = { now: NOW };
  const review = { secretEnv: KEY_ENV, auth: { mode: 'password', passwordEnv: PASSWORD_ENV }, listen: { host: '127.0.0.1', port: 0 }, ...opts.review };
  const base = { stateDb: statePath, stores, digest: { to: ['ops@example.org'] }, review };
  const first = validateConfig(base);
  const server = await startReviewServer({ config: first, log: opts.log ?? silentLogger, now: () => clock.now, ...(opts.timeouts ? { timeouts: opts.timeouts } : {}) });
  // Readers reach the page at the server's own address: digest links point there.
  const raw = { ...base, review: { ...review, url: server.url } };
  const config = validateConfig(raw);
  const configFile = join(dir, 'warden.yaml');
  writeFileSync(configFile, YAML.stringify(raw));
  return {
    dir, dbPath, statePath, configFile, config, server, url: server.url, clock,
    close: async () => {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A fresh browser context (no cookies) that fails the test on any request leaving loopback. */
export async function freshContext(browser: Browser, extraHTTPHeaders?: Record<string, string>): Promise<{ ctx: BrowserContext; external: string[] }> {
  const ctx = await browser.newContext(extraHTTPHeaders ? { extraHTTPHeaders } : {});
  const external: string[] = [];
  ctx.on('request', (r) => {
    if (!/^http:\/\/127\.0\.0\.1:\d+\//.test(r.url())) external.push(r.url());
  });
  return { ctx, external };
}

/** One row of the site's store as it is now (every column), or undefined. */
export function memory(site: Site, id: string): Record<string, unknown> | undefined {
  const db = new Database(site.dbPath, { readonly: true });
  try {
    return db.prepare(`SELECT * FROM memory WHERE id = ?`).get(id) as Record<string, unknown> | undefined;
  } finally {
    db.close();
  }
}

/** The site's state db, open for `fn`. */
export function withState<T>(site: Site, fn: (s: ReturnType<typeof openStateDb>) => T): T {
  const s = openStateDb(site.statePath);
  try {
    return fn(s);
  } finally {
    s.close();
  }
}
