import type { CheckReport } from '../layouts/contract.js';
import type { PruneResult } from '../layouts/warden/prune.js';
import type { Finding } from '../job/findings.js';
import type { SnapshotResult } from '../snapshot/create.js';
import type { TargetRun } from '../snapshot/targets/replicate.js';
import type { RestoreResult } from '../snapshot/restore.js';
import type { DigestResult } from '../digest/digest.js';
import type { DriftResult } from '../../jobs/drift.js';
import type { EraseReceipt } from '../erase/erase.js';
import { print } from './common.js';

/**
 * What a job's result says, for a person: `run <job>` and `enqueue <job>` print this without `--json`, with it the
 * result as JSON, as every command does. Every value goes through print (src/commands/common.ts).
 */
export async function printJobResult(job: string, result: unknown): Promise<void> {
  switch (job) {
    case 'prune':
      return printPrune(result as PruneResult);
    case 'integrity':
      return printCheck(result as CheckReport);
    case 'snapshot':
      return printSnapshot(result as SnapshotResult & { targets?: TargetRun[] });
    case 'drift':
      return printDrift(result as DriftResult);
    case 'digest':
      return printDigest(result as DigestResult);
    case 'restore':
      return printRestore(result as RestoreResult);
    case 'erase':
      return (await import('./erase.js')).printReceipt(result as EraseReceipt);
    default:
      return printFields(job, result);
  }
}

export function printPrune(r: PruneResult): void {
  const verb = r.dryRun ? 'would delete' : 'deleted';
  const how = r.dryRun ? '' : ` (${r.batches} batch(es), ${r.durationMs} ms)`;
  const c = r.counts;
  if (c && 'threads' in c) {
    // Mastra: threads idle past retention (each with its messages, embeddings and observations), then messages past theirs.
    const withThem = `${c.threadMessages} message(s) of those threads, ${c.embeddings} embedding(s), ${c.observations} observation record(s)`;
    print`${r.store}: ${verb} ${c.threads} idle thread(s) and ${c.messages} message(s) past retention as of ${r.now}; with them ${withThem}${how}`;
  } else {
    print`${r.store}: ${verb} ${r.deleted} row(s) as of ${r.now}: ${r.expired} expired, ${r.superseded} superseded, ${r.cascaded} by cascade${how}`;
  }
  const left = Object.entries(r.leftovers ?? {}).filter(([, n]) => n > 0);
  if (left.length > 0) print`  left behind by the SDK's own deletes, ${r.dryRun ? 'would remove' : 'removed'}: ${left.map(([code, n]) => `${code} ${n}`).join(', ')}`;
}

export function printCheck(r: CheckReport): void {
  print`${r.store} (${r.path}): ${r.ok ? 'healthy' : `${r.problems.length} problem(s)`}`;
  // A PostgreSQL store has no journal mode of its own (journalMode 'postgres' in the JSON): the line leaves it out.
  const journal = r.journalMode === 'postgres' ? '' : `, journal ${r.journalMode}`;
  print`  rows ${r.rows}, live ${r.live} (gap ${r.gap})${journal}, integrity ${r.integrity}, dangling ${r.dangling}, review due ${r.reviewDue}`;
  printFindings(r.problems);
  printFindings(r.notes);
}

export function printFindings(findings: Finding[], indent = '  '): void {
  for (const f of findings) {
    print`${indent}[${f.severity}] ${f.code}: ${f.message}`;
    if (f.ids && f.ids.length > 0) print`${indent}    ids: ${f.ids.join(', ')}${f.count && f.count > f.ids.length ? ` … (+${f.count - f.ids.length})` : ''}`;
  }
}

/** A snapshot's first line: where it is and what it holds. */
export function snapshotLine(r: SnapshotResult): string {
  const points = Object.entries(r.points).map(([c, n]) => `${c} ${n}`).join(', ');
  // A layout without a memory table (Mastra, mem0) has no one count of rows: its tables and their rows in all, and
  // those of its vectors' tables taken apart (pgvector) likewise.
  const inAll = (t: Record<string, number>) => `${Object.keys(t).length} table(s), ${Object.values(t).reduce((a, b) => a + b, 0)} row(s)`;
  const side = Object.keys(r.vectorTables ?? {}).length > 0 ? `; pgvector: ${inAll(r.vectorTables)}` : '';
  const rows = r.rows !== null ? `rows ${r.rows}${side}` : `store: ${inAll(r.tables ?? {})}${side}`;
  // The skew is between the store's copy and its collections' snapshots: with no collection it means nothing.
  return `${r.store}: snapshot ${r.name} in ${r.dir}: ${rows}${points ? `, points ${points}` : ''}, ${r.bytes} bytes${points ? `, skew ${r.skewMs} ms` : ''}`;
}

function printSnapshot(r: SnapshotResult & { targets?: TargetRun[] }): void {
  print`${snapshotLine(r)}`;
  if (r.pruned.length > 0) print`  retention deleted: ${r.pruned.join(', ')}`;
  if (r.removedPartials.length > 0) print`  leftovers of interrupted runs removed: ${r.removedPartials.join(', ')}`;
  for (const t of r.targets ?? []) print`  target ${t.target} (${t.where}): uploaded ${t.uploaded.length}, retention deleted ${t.pruned.length}`;
}

function printDrift(r: DriftResult): void {
  print`${r.store}: drift as of ${r.now}: ${r.due} due, ${r.confirmed} confirmed, ${r.contradicted} contradicted, ${r.superseded} superseded, ${r.changed} changed, ${r.unverifiable} unverifiable, ${r.refused} refused; ${r.toPerson} to a person (${r.reads} source read(s), ${r.sharedReads} shared)`;
  for (const v of r.verdicts) {
    const by = v.verifier === null ? '' : ` by ${v.verifier}`;
    print`  ${v.id}: ${v.verdict}${by}${v.needsPerson ? ', to a person' : ''}${v.supersededBy ? `, superseded by ${v.supersededBy}` : ''}${v.skipped ? `, skipped: ${v.skipped}` : ''}${v.reason ? ` (${v.reason})` : ''}`;
  }
}

export function printDigest(r: DigestResult): void {
  for (const d of r.deliveries) {
    print`${d.scope}: ${d.status} (${d.day}, period ${d.periodStart} to ${d.periodEnd} UTC${d.newRows !== undefined ? `, ${d.newRows} new, ${d.flagged} to look twice` : ''})`;
  }
}

/** `store`: the words naming the store in the undo command (storeWords), as the restore command named it. */
export function printRestore(r: RestoreResult, store = `--store ${r.store}`): void {
  print`${r.store}: ${r.dryRun ? 'dry run of restore' : 'restored'} from ${r.from}`;
  for (const s of r.steps) print`  ${s}`;
  if (!r.dryRun && typeof r.erasedKeptOut === 'number') print`  erased memories kept out: ${r.erasedKeptOut} (erase ledger: ${r.eraseLedger})`;
  if (r.undo) print`  to undo: memory-warden restore ${r.undo} ${store}`;
  if (r.erasedLeft) print`  NOT DONE: ${r.erasedLeft}`;
}

/** A job this file does not know: its name and each plain value of its result, one a line. */
function printFields(job: string, result: unknown): void {
  print`${job}: done`;
  if (!result || typeof result !== 'object') return;
  for (const [k, v] of Object.entries(result)) if (v === null || ['string', 'number', 'boolean'].includes(typeof v)) print`  ${k} ${String(v)}`;
}
