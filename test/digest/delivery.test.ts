import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { insertRows, tempDir } from '../helpers/store.js';
import Database from 'better-sqlite3';
import { NOW, HOUR, DAY, at, world, runDigestJob, stateRows, withState } from './fixtures.js';
import { WardenError } from '../../src/core/errors.js';
import { claimDelivery, listKey } from '../../src/digest/deliveries.js';
import { parseInstant, toCanonical } from '../../src/time/instants.js';

let smtp: TestSmtp;
let tmp: { dir: string; cleanup: () => void };

beforeEach(async () => {
  smtp = await startSmtp();
  tmp = tempDir('mw-delivery-');
});
afterEach(async () => {
  await smtp.close();
  tmp.cleanup();
});

const addRows = (path: string, rows: Parameters<typeof insertRows>[1]) => {
  const db = new Database(path);
  insertRows(db, rows);
  db.close();
};
const textOf = (i: number) => String(smtp.received[i]?.parsed.text ?? '');

describe('exactly once per day per recipient list', () => {
  it('a retried job (or a restart) after a successful send sends nothing; the next day starts where this one ended', async () => {
    const w = world(tmp.dir, { agent: [{ id: 'day1_a', created_at: at(NOW - HOUR) }] }, smtp);
    const first = await runDigestJob(w.config, NOW);
    expect(first.deliveries[0]!.status).toBe('sent');
    const again = await runDigestJob(w.config, NOW + 10 * 60_000);
    expect(again.deliveries[0]!.status).toBe('already-sent');
    const later = await runDigestJob(w.config, NOW + 5 * HOUR);
    expect(later.deliveries[0]!.status).toBe('already-sent');
    expect(smtp.received).toHaveLength(1);
    expect(smtp.attempts).toBe(1);

    // A row the agent writes after the first digest's period end belongs to the next one, once.
    addRows(w.storePath('agent'), [{ id: 'day2_a', created_at: at(NOW + 2 * HOUR) }]);
    const next = await runDigestJob(w.config, NOW + DAY);
    expect(next.deliveries[0]).toMatchObject({ status: 'sent', newRows: 1, periodStart: first.deliveries[0]!.periodEnd });
    expect(smtp.received).toHaveLength(2);
    expect(textOf(1)).toContain('day2_a');
    expect(textOf(1)).not.toContain('day1_a');
    expect(stateRows(w.config).map((d) => [d.day, d.status])).toEqual([['2026-11-29', 'sent'], ['2026-11-30', 'sent']]);
  });

  it('two concurrent jobs: one claims and sends, the other waits for its outcome and sends nothing', async () => {
    const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(NOW - HOUR) }] }, smtp);
    const release = smtp.hold();
    const a = runDigestJob(w.config, NOW);
    // Job A is inside DATA, the server holding its reply: the claim is taken, the outcome unknown.
    await vi.waitFor(() => expect(smtp.attempts).toBe(1), { timeout: 10_000, interval: 5 });
    let bDone = false;
    const b = runDigestJob(w.config, NOW).finally(() => (bDone = true));
    await new Promise((r) => setTimeout(r, 600));
    expect(bDone).toBe(false); // B does not report the day settled while A's outcome is unknown
    release();
    expect((await a).deliveries[0]!.status).toBe('sent');
    expect((await b).deliveries[0]!.status).toBe('already-sent');
    // And a third started at the same instant as another, both from scratch:
    const [c, d] = await Promise.all([runDigestJob(w.config, NOW + DAY), runDigestJob(w.config, NOW + DAY)]);
    expect([c.deliveries[0]!.status, d.deliveries[0]!.status].sort()).toEqual(['already-sent', 'sent']);
    expect(smtp.received).toHaveLength(2);
    expect(smtp.attempts).toBe(2);
  });

  it('a claim that fails does not silence the day: runs that waited on it take over and one sends', async () => {
    const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(NOW - HOUR) }] }, smtp);
    smtp.refuse(451);
    const release = smtp.hold();
    // the claimant (a CLI run: it does not retry) is inside DATA; three others start meanwhile
    const claimant = runDigestJob(w.config, NOW).then(() => 'sent', (e: WardenError) => e.kind);
    await vi.waitFor(() => expect(smtp.attempts).toBe(1), { timeout: 10_000, interval: 5 });
    const others = [runDigestJob(w.config, NOW), runDigestJob(w.config, NOW + 1000), runDigestJob(w.config, NOW + 2000)];
    await new Promise((r) => setTimeout(r, 300));
    smtp.refuse(null); // the server refuses only the message it is holding
    release();
    expect(await claimant).toBe('transient');
    const statuses = (await Promise.all(others)).map((r) => r.deliveries[0]!.status).sort();
    expect(statuses).toEqual(['already-sent', 'already-sent', 'sent']);
    expect(smtp.received).toHaveLength(1);
    expect(stateRows(w.config)[0]).toMatchObject({ status: 'sent', attempts: 2 });
  });

  it('one email per store when perStore is set, each exactly once', async () => {
    const w = world(tmp.dir, { a: [{ id: 'a_1', created_at: at(NOW - HOUR) }], b: [{ id: 'b_1', created_at: at(NOW - HOUR) }] }, smtp, { perStore: true });
    const r = await runDigestJob(w.config, NOW);
    expect(r.deliveries.map((d) => [d.scope, d.status])).toEqual([['a', 'sent'], ['b', 'sent']]);
    await runDigestJob(w.config, NOW + HOUR);
    expect(smtp.received.map((m) => m.parsed.subject).sort()).toEqual(['memory-warden digest 2026-11-29 [a]: 1 new', 'memory-warden digest 2026-11-29 [b]: 1 new']);
    expect(textOf(0)).not.toContain(smtp.received[0]!.parsed.subject!.includes('[a]') ? 'b_1' : 'a_1');
  });

  it('the day is the day in the digest\'s time zone: a retry past midnight UTC of an 18:30 New York digest sends nothing', async () => {
    const evening = Date.parse('2026-11-29T23:30:00Z'); // 18:30 in New York
    const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(evening - HOUR) }] }, smtp, {}, { worker: { timezone: 'America/New_York' } });
    expect((await runDigestJob(w.config, evening)).deliveries[0]).toMatchObject({ status: 'sent', day: '2026-11-29' });
    expect((await runDigestJob(w.config, evening + 40 * 60_000)).deliveries[0]).toMatchObject({ status: 'already-sent', day: '2026-11-29' });
    expect((await runDigestJob(w.config, evening + DAY)).deliveries[0]).toMatchObject({ status: 'sent', day: '2026-11-30' });
    expect(smtp.received).toHaveLength(2);
  });

  it('another recipient list is another digest', async () => {
    const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(NOW - HOUR) }] }, smtp);
    await runDigestJob(w.config, NOW);
    const other = { ...w.config, digest: { ...w.config.digest, to: ['ops@example.org'] } };
    const sameListReordered = { ...w.config, digest: { ...w.config.digest, to: ['OWNER@example.org'] } };
    expect((await runDigestJob(other, NOW)).deliveries[0]!.status).toBe('sent');
    expect((await runDigestJob(sameListReordered, NOW)).deliveries[0]!.status).toBe('already-sent');
    expect(smtp.received.map((m) => m.envelope.to)).toEqual([['owner@example.org'], ['ops@example.org']]);
  });
});

describe('SMTP down or refusing', () => {
  it('fails as transient, marks nothing reported, and loses nothing: the outage day arrives in the next digest', async () => {
    const w = world(tmp.dir, { agent: [{ id: 'before_outage', created_at: at(NOW - 2 * DAY - HOUR) }] }, smtp);
    expect((await runDigestJob(w.config, NOW - 2 * DAY)).deliveries[0]!.status).toBe('sent');

    addRows(w.storePath('agent'), [{ id: 'outage_day', created_at: at(NOW - DAY - HOUR) }]);
    await smtp.down();
    const err = await runDigestJob(w.config, NOW - DAY).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WardenError);
    expect((err as WardenError).transient).toBe(true);
    expect((err as WardenError).message).toMatch(/^digest: all stores: send digest via 127\.0\.0\.1:\d+: .*ECONNREFUSED/);
    // The retry, still down: still transient, still not sent.
    await expect(runDigestJob(w.config, NOW - DAY + HOUR)).rejects.toMatchObject({ kind: 'transient' });
    expect(stateRows(w.config).map((d) => [d.day, d.status, d.attempts])).toEqual([['2026-11-27', 'sent', 1], ['2026-11-28', 'failed', 2]]);

    await smtp.up();
    addRows(w.storePath('agent'), [{ id: 'next_day', created_at: at(NOW - HOUR) }]);
    const r = await runDigestJob(w.config, NOW);
    expect(r.deliveries[0]).toMatchObject({ status: 'sent', newRows: 2, periodStart: toCanonical(NOW - 2 * DAY - 60_000) });
    expect(smtp.received).toHaveLength(2);
    const t = textOf(1);
    expect(t).toContain('outage_day');
    expect(t).toContain('next_day');
    expect(t).not.toContain('before_outage');
    // The failed digest runs are recorded (the runner stamps them with the wall clock; the content test shows
    // how failed runs appear in the digest).
    withState(w.config, (db) => {
      const failed = db.prepare(`SELECT error FROM job_runs WHERE job = 'digest' AND outcome = 'failed'`).all() as { error: string }[];
      expect(failed).toHaveLength(2);
      expect(failed[0]!.error).toMatch(/ECONNREFUSED/);
    });
  });

  it('a server answering 451 is transient too; the retry the same day sends once', async () => {
    const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(NOW - HOUR) }] }, smtp);
    smtp.refuse(451);
    await expect(runDigestJob(w.config, NOW)).rejects.toMatchObject({ kind: 'transient', message: expect.stringContaining('451') });
    expect(smtp.received).toHaveLength(0);
    expect(stateRows(w.config)[0]).toMatchObject({ status: 'failed', sent_at: null });
    smtp.refuse(null);
    expect((await runDigestJob(w.config, NOW + 5 * 60_000)).deliveries[0]!.status).toBe('sent');
    expect((await runDigestJob(w.config, NOW + 10 * 60_000)).deliveries[0]!.status).toBe('already-sent');
    expect(smtp.received).toHaveLength(1);
    expect(smtp.attempts).toBe(2);
  });
});

describe('a crash between "server accepted" and "recorded sent"', () => {
  function crashedClaim(config: Parameters<typeof runDigestJob>[0], claimedAt: number) {
    return withState(config, (db) => claimDelivery(db, {
      key: listKey(config.digest.to, 'all stores'), now: claimedAt, end: claimedAt - 60_000, firstPeriodMs: DAY, claimMs: 15 * 60_000,
    }));
  }

  it('a fresh claim is waited on: taken over (same Message-ID) only once claimMinutes have passed', async () => {
    const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(NOW - HOUR) }] }, smtp, { claimMinutes: 1 / 60 }); // 1 s: a whole second, as claim times are recorded
    const claim = crashedClaim(w.config, NOW);
    if (claim.kind !== 'claimed') throw new Error('expected a claim');
    const r = await runDigestJob(w.config, NOW);
    // Taken over when the job's clock, moved on by its wait, says the claim lapsed: the takeover's claim time, as
    // recorded, is claimMinutes after the crashed claim's (the job's clock stands at NOW; only the wait moves it).
    expect(parseInstant(stateRows(w.config)[0]!.claimed_at)! - NOW).toBeGreaterThanOrEqual(1000);
    expect(r.deliveries[0]!.status).toBe('sent');
    expect(smtp.received).toHaveLength(1);
    expect(smtp.received[0]!.parsed.messageId).toBe(claim.delivery.message_id);
  });

  it('a stale claim of the same day is taken over and sent again with the same Message-ID (a duplicate, never a loss)', async () => {
    const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(NOW - HOUR) }] }, smtp);
    const claim = crashedClaim(w.config, NOW - 20 * 60_000);
    if (claim.kind !== 'claimed') throw new Error('expected a claim');
    const r = await runDigestJob(w.config, NOW);
    expect(r.deliveries[0]!.status).toBe('sent');
    expect(smtp.received[0]!.parsed.messageId).toBe(claim.delivery.message_id);
    expect(stateRows(w.config)[0]).toMatchObject({ status: 'sent', attempts: 2, period_start: claim.delivery.period_start });
  });

  it('a claim stuck from an earlier day is never resent, but its rows come again in the next digest', async () => {
    const w = world(tmp.dir, { agent: [{ id: 'stuck_day_row', created_at: at(NOW - DAY - HOUR) }, { id: 'today_row', created_at: at(NOW - HOUR) }] }, smtp);
    crashedClaim(w.config, NOW - DAY);
    const r = await runDigestJob(w.config, NOW);
    expect(r.deliveries[0]).toMatchObject({ status: 'sent', newRows: 2 });
    expect(smtp.received).toHaveLength(1);
    expect(textOf(0)).toContain('stuck_day_row');
    expect(stateRows(w.config).map((d) => [d.day, d.status])).toEqual([['2026-11-28', 'sending'], ['2026-11-29', 'sent']]);
  });
});
