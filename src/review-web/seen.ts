import { createHash } from 'node:crypto';
import type { CurrentMemory } from '../layouts/contract.js';

/**
 * What a form was drawn against: a digest of what its card showed and of everything a decision depends on or
 * changes. The row's fact, subject, source, stamp, expiry and successor; every older version whose chain leads to
 * it (a delete takes them along, so one the agent linked to it after the page was drawn would go unseen); and the
 * verdicts waiting on it (a decision resolves them all, so one recorded after the page was drawn would be resolved
 * unseen). A decision on a row that reads differently now is refused, whoever changed it: another tab, the command
 * line, the agent. Hashed, so the form carries no store text (nothing a browser could rewrite, nothing long).
 */
export function seenState(m: CurrentMemory, waiting: readonly number[]): string {
  if (!m) return 'gone';
  const older = [...(m.olderVersions ?? [])].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const chain = older.map((o) => [o.id, o.fact, o.subject, o.source, o.confirmed_at, o.expires_at, o.superseded_by]);
  const what = [m.id, m.fact, m.subject, m.source, m.confirmed_at, m.expires_at, m.superseded_by, [...waiting].sort((a, b) => a - b), chain];
  return createHash('sha256').update(JSON.stringify(what)).digest('base64url');
}
