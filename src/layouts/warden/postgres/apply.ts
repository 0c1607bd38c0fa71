import { toCanonical } from '../../../time/instants.js';
import { appliedOf, type ApplyDriftOptions, type Applied, type PostgresStoreHandle, type VerdictRecord } from '../../contract.js';
import { decideOnPg, utc } from './decision.js';
import { lockRow } from './review.js';
import { supersedeRowPg } from './correct.js';

/**
 * A drift verdict on PostgreSQL, as on SQLite (src/layouts/warden/apply.ts applyDecision): the row is locked and read
 * again inside the transaction; changed, superseded or deleted while it was verified, nothing is written to the store
 * and the verdict is recorded unverifiable. Confirmed: the stamp. Contradicted with a replacement: the row it already
 * reads as, or a new one, and the old row pointed at it. Everything else is recorded for a person, the store untouched.
 */
export async function applyDriftPg(store: PostgresStoreHandle, { decision: d, now, log }: ApplyDriftOptions): Promise<Applied> {
  const s = store.schema;
  return decideOnPg(store, log, 'drift', async (client) => {
    const out = appliedOf(d);
    await lockRow(client, s, d.memory.id);
    const row = (await client.query<{ fact: string; source: string; superseded_by: string | null }>(
      `SELECT fact, source, superseded_by FROM ${s}.memory WHERE id = $1`, [d.memory.id])).rows[0];
    const moved = !row ? 'the row was deleted while it was being verified'
      : row.superseded_by !== null ? 'the row was superseded while it was being verified'
      : row.fact !== d.memory.fact || row.source !== d.memory.source ? 'the row was rewritten while it was being verified'
      : undefined;
    const records: VerdictRecord[] = [];
    const done = (applied: Applied) => () => {
      for (const r of records) log.record(r);
      return applied;
    };
    if (moved) {
      records.push({ store: store.name, memoryId: d.memory.id, verdict: 'unverifiable', verifier: d.verifier, evidence: { reason: moved }, checkedAt: now });
      return done({ ...out, verdict: 'unverifiable', needsPerson: false, skipped: moved, reason: moved });
    }
    const record: VerdictRecord = { store: store.name, memoryId: d.memory.id, verdict: d.verdict, verifier: d.verifier, evidence: d.evidence, fingerprint: d.fingerprint, checkedAt: now, needsPerson: d.needsPerson };
    if (d.verdict === 'confirmed') {
      await client.query(`UPDATE ${s}.memory SET confirmed_at = ${utc('$1')} WHERE id = $2`, [toCanonical(now), d.memory.id]);
      records.push(record);
    } else if (d.verdict === 'contradicted' && d.supersede) {
      // Another live row of this subject may already say it (rows sharing a source): point at it, insert no twin.
      const existing = (await client.query<{ id: string }>(
        `SELECT n.id FROM ${s}.memory n JOIN ${s}.memory o ON o.id = $1 AND n.subject = o.subject
         WHERE n.id <> o.id AND n.fact = $2 AND n.source = $3 AND n.superseded_by IS NULL AND n.expires_at IS NULL
         ORDER BY n.created_at, n.id COLLATE "C" LIMIT 1`, [d.memory.id, d.supersede.fact, d.supersede.source])).rows[0]?.id;
      if (existing) await client.query(`UPDATE ${s}.memory SET superseded_by = $1 WHERE id = $2`, [existing, d.memory.id]);
      const newId = existing ?? await supersedeRowPg(client, s, d.memory.id, d.supersede, now);
      records.push({ ...record, resolvedAt: now, resolution: `superseded:${newId}` });
      // The new row starts from the reading that produced it, so "changed" is measured from there next time.
      if (!existing) records.push({ store: store.name, memoryId: newId, verdict: 'confirmed', verifier: d.verifier, evidence: { supersedes: d.memory.id, current: d.evidence.current }, fingerprint: d.fingerprint, checkedAt: now });
      out.supersededBy = newId;
    } else {
      records.push(record);
    }
    return done(out);
  });
}
