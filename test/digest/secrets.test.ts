/** Credentials in every form, planted in every field: none reaches the sent digest, the preview, the render or review list. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { cli } from '../helpers/cli.js';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { tempDir, type Row } from '../helpers/store.js';
import { htmlToText } from '../helpers/linkify.js';
import { leaksIn, plantedSecrets, type Complete, type PlantedSecret } from '../helpers/secret-forms.js';
import { NOW, HOUR, DAY, at, world, runDigestJob, withState } from './fixtures.js';
import { renderHtml, renderText } from '../../src/digest/render.js';
import type { DigestModel, StoreSection } from '../../src/digest/model.js';
import { recordVerdict } from '../../src/drift/record.js';
import { attachReviewLinks } from '../../src/digest/review-links.js';
import { validateConfig } from '../../src/config/config.js';

let smtp: TestSmtp;
let tmp: { dir: string; cleanup: () => void };

beforeEach(async () => {
  smtp = await startSmtp();
  tmp = tempDir('mw-digest-secrets-');
});
afterEach(async () => {
  await smtp.close();
  tmp.cleanup();
});

const PLANTED = plantedSecrets();
// Each field meets every encoding: field k of item i holds form i + 41k.
const at_ = (i: number, k: number) => PLANTED[(i + k * 41) % PLANTED.length]!;

/**
 * The leaks in a rendered digest or terminal output, two lines at a time (a token split across two lines is seen;
 * one reading of the whole output would be slow, not stricter).
 */
function leaked(shown: string, planted: PlantedSecret[] = PLANTED): string[] {
  const lines = shown.split('\n');
  return [...new Set(lines.flatMap((line, i) => leaksIn(`${line}\n${lines[i + 1] ?? ''}`, planted)))];
}

/** A store whose every text field holds a planted form: new rows, the review batch, drift evidence, job errors. */
function plantedRows(): Row[] {
  const rows: Row[] = [];
  PLANTED.forEach((_, i) => {
    rows.push({ id: `n_${i}`, fact: at_(i, 0).text, subject: at_(i, 1).text, source: at_(i, 2).text, created_at: at(NOW - HOUR - i * 1000) });
  });
  for (let i = 0; i < 50; i++) {
    rows.push({ id: `r_${i}`, fact: at_(i, 3).text, subject: at_(i, 4).text, source: at_(i, 5).text, created_at: at(NOW - 400 * DAY), confirmed_at: at(NOW - (300 - i) * DAY) });
  }
  return rows;
}

function plantState(db: Parameters<Parameters<typeof withState>[1]>[0]): void {
  const run = db.prepare(`INSERT INTO job_runs (job, store, started_at, finished_at, outcome, result, error) VALUES (?, ?, ?, ?, ?, ?, ?)`);
  for (let i = 0; i < 20; i++) run.run('snapshot', i % 2 ? 'agent' : null, at(NOW - HOUR), at(NOW - HOUR), 'failed', null, `request failed: ${at_(i, 6).text}`);
  for (let i = 0; i < 20; i++) {
    const evidence = { reason: at_(i, 7).text, previous: { value: at_(i, 8).text }, replacement: { fact: at_(i, 9).text } };
    recordVerdict(db, { store: 'agent', memoryId: `r_${i}`, verdict: 'contradicted', verifier: 'file', evidence, checkedAt: NOW - 2 * HOUR, needsPerson: true });
  }
}

describe('credentials in the digest', () => {
  it('the sent mail: no planted form in the text part, the HTML part, or what a mail client links', async () => {
    const rows = plantedRows();
    const w = world(tmp.dir, { agent: rows }, smtp, { maxRows: rows.length }, { review: { batch: 50 }, smtp: smtp.config({ timeoutMs: 120_000 }) });
    withState(w.config, plantState);
    await runDigestJob(w.config, NOW);
    expect(smtp.received).toHaveLength(1);
    const m = smtp.received[0]!;
    const text = String(m.parsed.text ?? '');
    const html = String(m.parsed.html || '');
    for (const id of ['n_0', `n_${PLANTED.length - 1}`, 'r_0', 'r_49']) expect(text).toContain(id);
    expect(text.match(/\[masked\]/g)!.length).toBeGreaterThan(PLANTED.length);
    expect(leaked(text)).toEqual([]);
    expect(leaked(htmlToText(html))).toEqual([]);
    expect(leaked(String(m.parsed.textAsHtml ?? ''))).toEqual([]);
  }, 240_000);

  it('digest --preview as a process: the text on stdout and the HTML written by --out', () => {
    const rows = plantedRows().slice(0, 120);
    const w = world(tmp.dir, { agent: rows }, null, { maxRows: rows.length });
    withState(w.config, plantState);
    const configFile = join(tmp.dir, 'warden.yaml');
    writeFileSync(configFile, YAML.stringify({ stateDb: w.config.stateDb, stores: { agent: { db: w.storePath('agent') } }, digest: { to: ['owner@example.org'], maxRows: rows.length }, review: { batch: 50 } }));
    const out = join(tmp.dir, 'digest.html');
    const r = cli(['digest', '--preview', '--config', configFile, '--out', out, '--now', new Date(NOW).toISOString()]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('[masked]');
    expect(leaked(r.stdout)).toEqual([]);
    expect(leaked(htmlToText(readFileSync(out, 'utf8')))).toEqual([]);
  }, 120_000);

  it('every store text the render shows goes through the masking: a model with a planted form in every field', () => {
    // Everything but our own words (names from config, times we wrote, codes, links we signed) is planted, so a
    // field that a render shows without masking leaks here; `Complete` makes a field added to the model a compile
    // error here until it is planted too.
    const list = PLANTED.slice(0, 80);
    let n = 0;
    const p = () => list[n++ % list.length]!.text;
    const link = (i: number) => (i % 2 ? 'http://127.0.0.1:1/open?t=signed' : '');
    const row = () => ({ id: p(), subject: p(), fact: p(), source: p(), createdAt: p(), expiresAt: p(), reasons: ['source is tool output'], before: { kind: 'text' as const, text: p(), writtenAt: p() } });
    const job = () => ({ job: 'snapshot', store: 'agent', finishedAt: at(NOW), error: p() });
    const finding = (severity: 'error' | 'info') => ({ code: 'orphan_points', severity, message: p(), ids: [p(), p()], count: 2 });
    const model: Complete<DigestModel> = {
      period: { start: at(NOW - DAY), end: at(NOW) }, generatedAt: at(NOW), scope: 'all stores', quiet: false,
      failedGlobalJobs: [job(), job()],
      stores: [{
        name: 'agent', select: { flag: '--store', value: 'agent' }, error: p(), unknown: false, since: p(),
        newRows: { total: 40, flagged: 20, more: 0, shown: Array.from({ length: 40 }, row) },
        review: { due: 20, afterDays: 90, supersede: true, batch: Array.from({ length: 20 }, (_, i) => ({ id: p(), subject: p(), fact: p(), source: p(), confirmedAt: p(), link: link(i) })) },
        maintenance: {
          rows: 10, live: 5, problems: [finding('error'), finding('error')], notes: [finding('info')],
          pruned: { runs: 1, deleted: 1, expired: 1, superseded: 0, cascaded: 0, counts: { threads: 1 } },
          lastSnapshot: { where: p(), takenAt: at(NOW), ageHours: 3 },
          awaitingPerson: { total: 20, shown: Array.from({ length: 20 }, (_, i) => ({ memoryId: p(), verdict: p(), verifier: p(), evidence: p(), checkedAt: p(), link: link(i) })) },
          failedJobs: [job(), job()],
        },
      }],
    };
    expect(n).toBeGreaterThan(list.length);
    expect(leaked(renderText(model), list)).toEqual([]);
    expect(leaked(htmlToText(renderHtml(model)), list)).toEqual([]);
  });
});

describe('ids that hold a credential', () => {
  it('with review.url, a review link\'s token (base64url JSON anyone can read) does not carry such an id', () => {
    process.env.MW_TEST_SECRET_IDS_KEY = 'k'.repeat(40);
    const ids = PLANTED.filter((_, i) => i % 5 === 0).map((p) => p.text);
    const rows = ids.map((id, i) => ({ id, subject: 'creds', fact: 'an agent used a token as the id', source: 'tool', confirmedAt: at(NOW - (300 - i) * DAY) }));
    const section: StoreSection = {
      name: 'agent', select: { flag: '--store', value: 'agent' }, newRows: { total: 0, flagged: 0, shown: [], more: 0 },
      review: { due: rows.length, afterDays: 90, batch: [...rows, { id: 'm_plain', subject: 's', fact: 'f', source: 'message', confirmedAt: at(NOW - 400 * DAY) }] },
      maintenance: {
        rows: 1, live: 1, problems: [], notes: [], pruned: { runs: 0, deleted: 0, expired: 0, superseded: 0, cascaded: 0 }, lastSnapshot: null, failedJobs: [],
        awaitingPerson: { total: ids.length, shown: ids.map((id) => ({ memoryId: id, verdict: 'unverifiable', verifier: null, evidence: null, checkedAt: at(NOW) })) },
      },
    };
    attachReviewLinks(section, validateConfig({ review: { url: 'https://warden.example.org/review/', secretEnv: 'MW_TEST_SECRET_IDS_KEY' } }), NOW, () => {});
    const model: DigestModel = { period: { start: at(NOW - DAY), end: at(NOW) }, generatedAt: at(NOW), scope: 'agent', stores: [section], failedGlobalJobs: [], quiet: false };
    const text = renderText(model);
    expect(text.match(/review on the page: https:\/\/warden\.example\.org\/review\/open\?t=/g)).toHaveLength(2 * ids.length + 1);
    expect(leaked(text)).toEqual([]);
    expect(leaked(renderHtml(model))).toEqual([]);
    // A plain id keeps its own link, to its place on the page.
    expect(section.review.batch.at(-1)!.link).toMatch(/#m-[0-9a-f]{16}$/);
  });
});

describe('credentials in review list', () => {
  it('as a process: no planted form in the terminal, ids shown exactly', () => {
    const rows = plantedRows();
    const w = world(tmp.dir, { agent: rows }, null, {}, { review: { batch: 50 } });
    withState(w.config, plantState);
    const configFile = join(tmp.dir, 'warden.yaml');
    writeFileSync(configFile, YAML.stringify({ stateDb: w.config.stateDb, stores: { agent: { db: w.storePath('agent') } }, digest: { to: ['owner@example.org'] }, review: { batch: 50 } }));
    const r = cli(['review', 'list', '--config', configFile, '--store', 'agent', '--now', new Date(NOW).toISOString()]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('waiting for a person');
    for (const id of ['r_0', 'r_19', 'r_49']) expect(r.stdout).toContain(`  ${id}  `);
    expect(r.stdout).toContain('[masked]');
    expect(leaked(r.stdout)).toEqual([]);
  }, 120_000);
});
