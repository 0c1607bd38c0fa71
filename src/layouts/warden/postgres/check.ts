import type { CheckOptions, CheckReport, PostgresStoreHandle } from '../../contract.js';
import { finding, isProblem, ID_SAMPLE, type Finding } from '../../../job/findings.js';
import { DAY_MS, toCanonical } from '../../../time/instants.js';
import { engineFor } from '../../../engines/registry.js';
import { liveViewPresent } from './schema.js';

/** Live at $1: the view's rule, with the check's `now` instead of the server's clock. */
export const LIVE = (now: string) => `(superseded_by IS NULL AND (expires_at IS NULL OR expires_at > ${now}))`;

/**
 * Due for review before the cutoff $n (src/layouts/warden/queue.ts): live with no expiry (a row with one decays, it is
 * not reviewed), confirmed before the cutoff. What reviewDue takes and the check counts.
 */
export const DUE = (cut: string) => `(superseded_by IS NULL AND expires_at IS NULL AND confirmed_at < ${cut})`;

/**
 * The warden check on PostgreSQL: every count in one pass over the table (rows, live, the gap, empty sources, review
 * due, prune pending), rows superseded by a row that does not exist (possible only with the foreign key dropped or
 * disabled), supersede rings (a chain that never ends: never live, and no prune rule reaches it), the view, and the
 * database's own check of the store's indexes (amcheck, src/engines/postgres/). Times are timestamptz: no value can
 * be unparseable or in another form, so there is no timestamp finding to make. Reads only.
 */
export async function checkWardenPg(store: PostgresStoreHandle, { ctx }: CheckOptions): Promise<CheckReport> {
  const s = store.schema;
  const nowMs = ctx.now();
  const now = new Date(nowMs);
  const reviewCut = new Date(nowMs - ctx.config.review.afterDays * DAY_MS);
  const cut = new Date(nowMs - ctx.config.prune.supersededAfterDays * DAY_MS);
  const findings: Finding[] = [];
  ctx.progress?.start('check', 4, 'steps');
  const engine = await engineFor(store.config);
  const [integrity, view, tally, dangling, rings] = await Promise.all([
    engine.integrity(store),
    liveViewPresent(store),
    store.pg.query<Record<string, string>>(
      `SELECT count(*) AS rows, count(*) FILTER (WHERE ${LIVE('$1')}) AS live,
         count(*) FILTER (WHERE trim(source) = '') AS empty_source,
         count(*) FILTER (WHERE ${DUE('$2')}) AS review_due,
         count(*) FILTER (WHERE ($4 AND expires_at <= $1) OR (superseded_by IS NOT NULL AND created_at < $3)) AS pending
       FROM ${s}.memory`, [now, reviewCut, cut, ctx.config.prune.expired]),
    store.pg.query<{ id: string; n: string }>(
      `SELECT m.id, count(*) OVER () AS n FROM ${s}.memory m WHERE m.superseded_by IS NOT NULL
         AND NOT EXISTS (SELECT 1 FROM ${s}.memory p WHERE p.id = m.superseded_by) ORDER BY m.id LIMIT ${ID_SAMPLE}`),
    store.pg.query<{ id: string; n: string }>(
      // Every chain that ends (in a row superseded by nothing, or by a row that is gone) is reached from its end;
      // what is not reached runs in a ring, or into one. One pass down the superseded_by index.
      `WITH RECURSIVE reached(id) AS (
         SELECT m.id FROM ${s}.memory m WHERE m.superseded_by IS NULL
           OR NOT EXISTS (SELECT 1 FROM ${s}.memory p WHERE p.id = m.superseded_by)
         UNION SELECT c.id FROM ${s}.memory c JOIN reached r ON c.superseded_by = r.id)
       SELECT m.id, count(*) OVER () AS n FROM ${s}.memory m LEFT JOIN reached r ON r.id = m.id WHERE r.id IS NULL ORDER BY m.id LIMIT ${ID_SAMPLE}`),
  ]);
  ctx.progress?.tick(3);
  const t = Object.fromEntries(Object.entries(tally.rows[0]!).map(([k, v]) => [k, Number(v)]));
  if (integrity.result !== 'ok') findings.push(finding('integrity', 'error', `amcheck: ${integrity.result}`));
  if (integrity.skipped) findings.push(finding('integrity_skipped', 'info', integrity.skipped));
  if (!view) findings.push(finding('no_live_view', 'warning', 'no live_memory view: retrieval should read live rows only (init adds it)'));
  const danglingN = Number(dangling.rows[0]?.n ?? 0);
  if (danglingN > 0) {
    findings.push(finding('dangling', 'error', `${danglingN} row(s) superseded by a row that no longer exists (the foreign key was dropped or disabled when it was deleted)`, dangling.rows.map((r) => r.id), danglingN));
  }
  const ringN = Number(rings.rows[0]?.n ?? 0);
  if (ringN > 0) {
    findings.push(finding('supersede_ring', 'error', `${ringN} row(s) in a supersede chain that leads back to itself (or into such a ring): never live, and prune deletes them only by the superseded rule; fix by hand`, rings.rows.map((r) => r.id), ringN));
  }
  if (t.empty_source! > 0) {
    const sample = await store.pg.query<{ id: string }>(`SELECT id FROM ${s}.memory WHERE trim(source) = '' ORDER BY id LIMIT ${ID_SAMPLE}`);
    findings.push(finding('empty_source', 'warning', `${t.empty_source} row(s) with no source: they cannot be re-checked, only deleted`, sample.rows.map((r) => r.id), t.empty_source));
  }
  if (t.review_due! > 0) {
    const oldest = await store.pg.query<{ id: string }>(
      `SELECT id FROM ${s}.memory WHERE ${DUE('$1')} ORDER BY confirmed_at, id COLLATE "C" LIMIT ${ID_SAMPLE}`, [reviewCut]);
    findings.push(finding('review_due', 'info', `${t.review_due} live row(s) confirmed more than ${ctx.config.review.afterDays} days ago: due for review`, oldest.rows.map((r) => r.id), t.review_due));
  }
  if (t.pending! > 0) findings.push(finding('prune_pending', 'info', `${t.pending} row(s) expired or long superseded: the next prune deletes them (and the older versions behind them)`, undefined, t.pending));
  ctx.progress?.done();
  const problems = findings.filter(isProblem);
  return {
    ok: problems.length === 0, store: store.name, path: store.path, checkedAt: toCanonical(nowMs),
    rows: t.rows!, live: t.live!, gap: t.rows! - t.live!, integrity: integrity.result, journalMode: 'postgres',
    dangling: danglingN, reviewDue: t.review_due!, problems, notes: findings.filter((f) => !isProblem(f)),
  };
}
