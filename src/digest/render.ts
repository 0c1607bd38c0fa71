import type { Finding } from '../job/findings.js';
import type { Before, DigestModel, FailedJob, FlaggedRow, StoreSection } from './model.js';
import { escapeHtml, headerText, html, maskSecrets, plain, reviewCommands, sameTexts } from './untrusted.js';

/**
 * Pure functions from a DigestModel to the subject, the plain-text part and the HTML part. Same content in both
 * parts. Every string that came from a store goes through `plain` (text) or `html` (HTML): one line, defanged,
 * escaped. Only numbers, times we wrote and config-checked names are printed as they are.
 */

const FACT_CHARS = 600;
const FIELD_CHARS = 200;
const ERROR_CHARS = 500;

export interface RenderedDigest {
  subject: string;
  text: string;
  html: string;
}

export function renderDigest(model: DigestModel, opts: { prefix?: string } = {}): RenderedDigest {
  return sameTexts(() => ({ subject: renderSubject(model, opts.prefix), text: renderText(model), html: renderHtml(model) }));
}

function totals(model: DigestModel) {
  const sum = (f: (s: StoreSection) => number) => model.stores.reduce((n, s) => n + f(s), 0);
  return {
    newRows: sum((s) => s.newRows.total),
    flagged: sum((s) => s.newRows.flagged),
    failed: sum((s) => s.maintenance.failedJobs.length) + model.failedGlobalJobs.length,
    problems: sum((s) => s.maintenance.problems.length),
    unreadable: sum((s) => (s.error ? 1 : 0)),
  };
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

export function renderSubject(model: DigestModel, prefix = 'memory-warden digest'): string {
  const t = totals(model);
  const scope = model.scope === 'all stores' ? '' : ` [${model.scope}]`;
  const day = model.period.end.slice(0, 10);
  const parts = model.quiet
    ? ['all quiet']
    : [
        `${t.newRows} new`,
        t.flagged > 0 && `${t.flagged} to look twice`,
        t.failed > 0 && plural(t.failed, 'failed job'),
        t.problems > 0 && plural(t.problems, 'integrity problem'),
        t.unreadable > 0 && plural(t.unreadable, 'unreadable store'),
      ].filter(Boolean);
  return headerText(`${prefix} ${day}${scope}: ${parts.join(', ')}`);
}

function ageText(hours: number): string {
  if (!Number.isFinite(hours)) return 'age unknown';
  if (hours < 48) return `${Math.round(hours)} h ago`;
  return `${Math.round(hours / 24)} days ago`;
}

function pruneText(s: StoreSection): string {
  const p = s.maintenance.pruned;
  if (p.runs === 0) return 'no prune ran in this period';
  const c = p.counts;
  if (c && 'threads' in c) {
    return `deleted ${c.threads ?? 0} idle thread(s) and ${c.messages ?? 0} message(s) past retention in ${plural(p.runs, 'run')} (with the threads, ${c.threadMessages ?? 0} message(s); ${c.embeddings ?? 0} embedding(s), ${c.observations ?? 0} observation record(s))`;
  }
  return `deleted ${p.deleted} row(s) in ${plural(p.runs, 'run')} (${p.expired} expired, ${p.superseded} superseded, ${p.cascaded} by cascade)`;
}

function snapshotText(s: StoreSection): string {
  const snap = s.maintenance.lastSnapshot;
  if (!snap) return 'none recorded';
  return `${snap.takenAt} UTC (${ageText(snap.ageHours)})${snap.where ? ` in ${plain(snap.where, FIELD_CHARS)}` : ''}`;
}

function findingText(f: Finding): string {
  const ids = f.ids && f.ids.length > 0 ? ` [${f.ids.slice(0, 10).map((id) => plain(id, 80)).join(', ')}${(f.count ?? 0) > 10 ? ', …' : ''}]` : '';
  return `[${f.severity}] ${f.code}: ${plain(f.message)}${ids}`;
}

function jobText(j: FailedJob): string {
  return `${j.finishedAt} ${j.job}${j.store ? ` (${j.store})` : ''}: ${plain(j.error, ERROR_CHARS)}`;
}

// ---------------------------------------------------------------- text

export function renderText(model: DigestModel): string {
  const out: string[] = [];
  const line = (s = '') => out.push(s);
  const t = totals(model);
  line(`memory-warden digest: ${model.scope}`);
  line(`Period: ${model.period.start} to ${model.period.end} UTC`);
  line(model.quiet ? 'All quiet: nothing new, no failed job, no integrity problem.' : `${t.newRows} new memories, ${t.flagged} to look twice, ${plural(t.failed, 'failed job')}.`);
  if (!model.quiet) line('Text from the stores is shown defanged: hxxp[://] and [.] mark links that were not made clickable.');
  for (const s of model.stores) {
    line();
    line(`=== ${s.name} ${'='.repeat(Math.max(3, 66 - s.name.length))}`);
    if (s.error) line(`!! could not read this store: ${plain(s.error, ERROR_CHARS)}`);
    if (s.unknown) {
      line(UNKNOWN);
      continue;
    }
    if (s.since) line(`(This store's section starts at ${plain(s.since, 40)} UTC: an earlier digest had no report of it.)`);
    // What changed and what broke first; the review batch (much the same list all week) last.
    textNewRows(s, line, model.quiet);
    textMaintenance(s, line, model.quiet);
    if (!model.quiet) textReview(s, line);
  }
  if (model.failedGlobalJobs.length > 0) {
    line();
    line('=== jobs of no single store that failed since the last digest');
    for (const j of model.failedGlobalJobs) line(`  ${jobText(j)}`);
  }
  line();
  line(`Generated ${model.generatedAt} UTC by memory-warden.`);
  return out.join('\n') + '\n';
}

type Line = (s?: string) => void;

/** A store nobody reported on: nothing of it is known, and nothing of it is lost. */
const UNKNOWN = 'Unknown: no report of this store, so its new memories, counts, integrity and jobs are not known (not zero). Its period stays open: the next digest after its host reports lists what this one could not.';

// ---------------------------------------------------------------- before -> after

const DIFF_LINES = 10;

/**
 * A memory rewritten in place: the lines its text lost and gained (blank lines skipped). Masked whole before it is
 * cut into lines: a credential a rule knows only with the line before it (a key name, a PEM header) stays masked.
 */
export function changedLines(before: string, after: string): { removed: string[]; added: string[] } {
  const lines = (t: string) => maskSecrets(t.normalize('NFKC')).split(/\r\n?|\n/).map((l) => l.trim()).filter((l) => l !== '');
  const was = lines(before);
  const now = lines(after);
  return { removed: was.filter((l) => !now.includes(l)), added: now.filter((l) => !was.includes(l)) };
}

/** What a row's before says in our own words (a text before is shown by the caller). */
function beforeWords(b: Before): string {
  if (b.kind === 'none') return 'none: it was first written in this period';
  if (b.kind === 'unknown') return 'unknown: memory-warden has no record of what it said before this period (it keeps one from the first digest after a text is written)';
  return `as written ${plain(b.writtenAt, 40)} UTC`;
}

function textBefore(r: FlaggedRow, b: Before, line: Line): void {
  if (b.kind !== 'text') {
    line(`     before:  (${beforeWords(b)})`);
    line(`     after:   ${plain(r.fact, FACT_CHARS)}`);
    return;
  }
  if (b.text === r.fact) {
    line(`     text:    ${plain(r.fact, FACT_CHARS)}`);
    line(`     (unchanged since ${plain(b.writtenAt, 40)} UTC: only its time was updated)`);
    return;
  }
  line(`     before:  ${plain(b.text, FACT_CHARS)}  (${beforeWords(b)})`);
  line(`     after:   ${plain(r.fact, FACT_CHARS)}`);
  const d = changedLines(b.text, r.fact);
  for (const [mark, list] of [['-', d.removed], ['+', d.added]] as const) {
    for (const l of list.slice(0, DIFF_LINES)) line(`       ${mark} ${plain(l, FIELD_CHARS)}`);
    if (list.length > DIFF_LINES) line(`       ${mark} … ${list.length - DIFF_LINES} more line(s)`);
  }
}

function textRow(r: FlaggedRow, line: Line): void {
  const flag = r.reasons.length > 0 ? '!! ' : '   ';
  line(`${flag}${plain(r.id, 80)}  ${r.before ? 'written' : 'created'} ${plain(r.createdAt, 40)}${r.expiresAt ? `  expires ${plain(r.expiresAt, 40)}` : ''}`);
  line(`     subject: ${plain(r.subject, FIELD_CHARS)}`);
  if (r.before) textBefore(r, r.before, line);
  else line(`     fact:    ${plain(r.fact, FACT_CHARS)}`);
  line(`     source:  ${r.source.trim() === '' ? '(none)' : plain(r.source, FIELD_CHARS)}`);
  if (r.reasons.length > 0) line(`     LOOK TWICE: ${r.reasons.join('; ')}`);
}

function textNewRows(s: StoreSection, line: Line, quiet: boolean): void {
  const n = s.newRows;
  if (n.total === 0) {
    line(quiet ? 'Nothing new.' : 'Nothing new in this store.');
    return;
  }
  line(`New memories: ${n.total}${n.flagged > 0 ? `, ${n.flagged} to look twice (first, marked !!)` : ''}. Newest first.`);
  for (const r of n.shown) textRow(r, line);
  if (n.more > 0) line(`   … and ${n.more} more not listed (${n.total} new in all).`);
}

function textReview(s: StoreSection, line: Line): void {
  line();
  if (s.review.due === 0) {
    line(`Review queue: no live row confirmed more than ${s.review.afterDays} days ago.`);
    return;
  }
  line(`Review queue: ${s.review.due} live row(s) confirmed more than ${s.review.afterDays} days ago. This week's ${s.review.batch.length}, oldest first:`);
  for (const r of s.review.batch) {
    const cmd = reviewCommands(r.id, s.select);
    line(`   ${plain(r.id, 80)}  confirmed ${plain(r.confirmedAt, 40)}  ${plain(r.subject, 80)}: ${plain(r.fact, 300)}`);
    line(`     source: ${r.source.trim() === '' ? '(none)' : plain(r.source, FIELD_CHARS)}`);
    if (r.link) line(`     review on the page: ${r.link}`);
    else {
      line(`     $ ${cmd.confirm}`);
      if (s.review.supersede !== false && cmd.supersede) line(`     $ ${cmd.supersede}`);
    }
  }
}

function textMaintenance(s: StoreSection, line: Line, quiet: boolean): void {
  const m = s.maintenance;
  line();
  line('Maintenance:');
  line(`   rows ${m.rows}, live ${m.live} (gap ${m.rows - m.live})${quiet && s.review.due > 0 ? `, ${s.review.due} due for review` : ''}`);
  line(`   prune: ${pruneText(s)}`);
  line(`   integrity: ${m.problems.length === 0 ? 'no problems' : plural(m.problems.length, 'problem')}`);
  for (const f of [...m.problems, ...m.notes]) line(`     ${findingText(f)}`);
  line(`   last good snapshot: ${snapshotText(s)}`);
  if (m.awaitingPerson.total === 0) line('   drift verdicts awaiting a person: none');
  else {
    line(`   drift verdicts awaiting a person: ${m.awaitingPerson.total}`);
    for (const v of m.awaitingPerson.shown) {
      line(`     ${plain(v.memoryId, 80)}: ${plain(v.verdict)}${v.verifier ? ` by ${plain(v.verifier, 80)}` : ''} (${plain(v.checkedAt, 40)})${v.evidence ? `: ${plain(v.evidence, 300)}` : ''}`);
      if (v.link) line(`       review on the page: ${v.link}`);
    }
  }
  if (m.failedJobs.length === 0) line('   failed jobs since the last digest: none');
  else {
    line(`   failed jobs since the last digest: ${m.failedJobs.length}`);
    for (const j of m.failedJobs) line(`     ${jobText(j)}`);
  }
}

// ---------------------------------------------------------------- HTML

const FONT = "font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif";
const MONO = "font-family:ui-monospace,Menlo,Consolas,'Courier New',monospace";
const MONO_LINE = `${MONO};font-size:12px;white-space:pre-wrap;word-break:break-all`;
const S = {
  body: `margin:0;padding:16px;background:#f4f5f7;${FONT};color:#1f2328;font-size:14px;line-height:1.45`,
  card: 'max-width:960px;margin:0 auto 16px auto;background:#ffffff;border:1px solid #d0d7de;border-radius:6px;padding:16px 20px',
  h1: 'margin:0 0 4px 0;font-size:20px',
  h2: 'margin:0 0 8px 0;font-size:17px;border-bottom:1px solid #d0d7de;padding-bottom:6px',
  h3: 'margin:16px 0 6px 0;font-size:15px',
  muted: 'color:#57606a;font-size:12px',
  table: 'border-collapse:collapse;width:100%;font-size:13px',
  th: 'text-align:left;padding:6px 8px;border-bottom:2px solid #d0d7de;background:#f6f8fa;white-space:nowrap',
  td: 'padding:6px 8px;border-bottom:1px solid #eaeef2;vertical-align:top',
  flagged: 'background:#fff8e1',
  flagCell: 'padding:6px 8px;border-bottom:1px solid #eaeef2;vertical-align:top;border-left:4px solid #d4a72c',
  reason: 'display:inline-block;margin:2px 4px 0 0;padding:1px 6px;border-radius:10px;background:#ffe8a3;color:#6b4e00;font-size:12px',
  code: `${MONO};font-size:12px;background:#f6f8fa;padding:1px 4px;border-radius:3px;word-break:break-all`,
  cmd: `${MONO};font-size:12px;color:#24292f;background:#f6f8fa;padding:2px 6px;border-radius:3px;display:block;margin-top:2px;word-break:break-all`,
  ok: 'color:#1a7f37',
  bad: 'color:#cf222e;font-weight:bold',
  warn: 'color:#9a6700',
};

export function renderHtml(model: DigestModel): string {
  const t = totals(model);
  const parts: string[] = [];
  parts.push(`<div style="${S.card}">`);
  parts.push(`<h1 style="${S.h1}">memory-warden digest: ${escapeHtml(model.scope)}</h1>`);
  parts.push(`<div style="${S.muted}">Period ${model.period.start} to ${model.period.end} UTC</div>`);
  parts.push(
    model.quiet
      ? `<p style="${S.ok};margin:10px 0 0 0"><b>All quiet:</b> nothing new, no failed job, no integrity problem.</p>`
      : `<p style="margin:10px 0 0 0"><b>${t.newRows}</b> new memories, <b style="${t.flagged ? S.warn : ''}">${t.flagged}</b> to look twice, <b style="${t.failed ? S.bad : ''}">${plural(t.failed, 'failed job')}</b>.</p>`,
  );
  if (!model.quiet) parts.push(`<p style="${S.muted};margin:6px 0 0 0">Text from the stores is shown defanged: hxxp[://] and [.] mark links that were not made clickable.</p>`);
  parts.push('</div>');
  for (const s of model.stores) parts.push(htmlStore(s, model.quiet));
  if (model.failedGlobalJobs.length > 0) {
    parts.push(`<div style="${S.card}"><h2 style="${S.h2}">Jobs of no single store that failed since the last digest</h2>${htmlJobs(model.failedGlobalJobs)}</div>`);
  }
  parts.push(`<div style="max-width:960px;margin:0 auto;${S.muted}">Generated ${model.generatedAt} UTC by memory-warden.</div>`);
  return `<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>${escapeHtml(renderSubject(model))}</title></head>
<body style="${S.body}">
${parts.join('\n')}
</body></html>
`;
}

function htmlStore(s: StoreSection, quiet: boolean): string {
  const p: string[] = [`<div style="${S.card}">`, `<h2 style="${S.h2}">${escapeHtml(s.name)}</h2>`];
  if (s.error) p.push(`<p style="${S.bad}">Could not read this store: ${html(s.error, ERROR_CHARS)}</p>`);
  if (s.unknown) return [...p, `<p style="${S.bad}">${escapeHtml(UNKNOWN)}</p>`, '</div>'].join('\n');
  if (s.since) p.push(`<p style="${S.muted}">This store's section starts at ${html(s.since, 40)} UTC: an earlier digest had no report of it.</p>`);
  p.push(htmlNewRows(s, quiet));
  p.push(htmlMaintenance(s, quiet));
  if (!quiet) p.push(htmlReview(s));
  p.push('</div>');
  return p.join('\n');
}

function htmlNewRows(s: StoreSection, quiet: boolean): string {
  const n = s.newRows;
  if (n.total === 0) return `<p style="margin:4px 0">${quiet ? 'Nothing new.' : 'Nothing new in this store.'}</p>`;
  const rows = n.shown.map((r) => {
    const f = r.reasons.length > 0;
    const first = f ? S.flagCell : S.td;
    const reasons = f ? `<div>${r.reasons.map((x) => `<span style="${S.reason}">${escapeHtml(x)}</span>`).join('')}</div>` : '';
    return `<tr style="${f ? S.flagged : ''}">
<td style="${first}"><code style="${S.code}">${html(r.id, 80)}</code>${f ? `<div style="${S.warn};font-size:11px;font-weight:bold;margin-top:3px;white-space:nowrap">LOOK TWICE</div>` : ''}</td>
<td style="${S.td}"><b>${html(r.subject, FIELD_CHARS)}</b><br>${r.before ? htmlBefore(r, r.before) : html(r.fact, FACT_CHARS)}${reasons}</td>
<td style="${S.td}">${r.source.trim() === '' ? `<i style="${S.bad}">none</i>` : html(r.source, FIELD_CHARS)}</td>
<td style="${S.td};white-space:nowrap">${html(r.createdAt, 40)}${r.expiresAt ? `<br><span style="${S.muted}">expires ${html(r.expiresAt, 40)}</span>` : ''}</td>
</tr>`;
  });
  const more = n.more > 0 ? `<p style="margin:6px 0 0 0"><b>… and ${n.more} more</b> not listed (${n.total} new in all).</p>` : '';
  return `<h3 style="${S.h3}">New memories: ${n.total}${n.flagged > 0 ? ` <span style="${S.warn}">(${n.flagged} to look twice, listed first)</span>` : ''}</h3>
<table role="presentation" style="${S.table}" cellspacing="0" cellpadding="0">
<tr><th style="${S.th}">id</th><th style="${S.th}">subject / fact</th><th style="${S.th}">source</th><th style="${S.th}">created (UTC)</th></tr>
${rows.join('\n')}
</table>${more}`;
}

function htmlBefore(r: FlaggedRow, b: Before): string {
  const label = (t: string) => `<span style="${S.muted}">${t}</span>`;
  if (b.kind !== 'text') return `${label(`before: ${escapeHtml(beforeWords(b))}`)}<br>${label('after:')} ${html(r.fact, FACT_CHARS)}`;
  if (b.text === r.fact) return `${html(r.fact, FACT_CHARS)}<br>${label(`unchanged since ${html(b.writtenAt, 40)} UTC: only its time was updated`)}`;
  const d = changedLines(b.text, r.fact);
  const lines = (mark: string, list: string[], style: string) => list.slice(0, DIFF_LINES).map((l) => `<div style="${MONO_LINE};${style}">${mark} ${html(l, FIELD_CHARS)}</div>`).join('')
    + (list.length > DIFF_LINES ? `<div style="${MONO_LINE};${style}">${mark} … ${list.length - DIFF_LINES} more line(s)</div>` : '');
  return `${label(`before (${escapeHtml(beforeWords(b))}):`)} ${html(b.text, FACT_CHARS)}<br>${label('after:')} ${html(r.fact, FACT_CHARS)}`
    + `<div style="margin-top:4px">${lines('-', d.removed, 'color:#cf222e')}${lines('+', d.added, 'color:#1a7f37')}</div>`;
}

function htmlReview(s: StoreSection): string {
  if (s.review.due === 0) return `<h3 style="${S.h3}">Review queue</h3><p style="margin:4px 0">No live row confirmed more than ${s.review.afterDays} days ago.</p>`;
  const rows = s.review.batch.map((r) => {
    const cmd = reviewCommands(r.id, s.select);
    return `<tr>
<td style="${S.td}"><code style="${S.code}">${html(r.id, 80)}</code><br><span style="${S.muted}">confirmed ${html(r.confirmedAt, 40)}</span></td>
<td style="${S.td}"><b>${html(r.subject, 80)}</b>: ${html(r.fact, 300)}<br><span style="${S.muted}">source: ${r.source.trim() === '' ? 'none' : html(r.source, FIELD_CHARS)}</span>
${r.link ? reviewLinkHtml(r.link) : `<code style="${S.cmd}">${escapeHtml(cmd.confirm)}</code>${s.review.supersede !== false && cmd.supersede ? `<code style="${S.cmd}">${escapeHtml(cmd.supersede)}</code>` : ''}`}</td>
</tr>`;
  });
  return `<h3 style="${S.h3}">Review queue: ${s.review.due} due</h3>
<p style="margin:4px 0">Live rows confirmed more than ${s.review.afterDays} days ago. This week's ${s.review.batch.length}, oldest first, each with the command that confirms it or replaces it:</p>
<table role="presentation" style="${S.table}" cellspacing="0" cellpadding="0">
<tr><th style="${S.th}">id</th><th style="${S.th}">fact and commands</th></tr>
${rows.join('\n')}
</table>`;
}

/** The one place a review link becomes HTML: our own signed URL, with our own words; never store text. */
function reviewLinkHtml(link: string): string {
  return `<div style="margin:4px 0"><a href="${escapeHtml(link)}">Review on the page</a></div>`;
}

function htmlJobs(jobs: FailedJob[]): string {
  return `<table role="presentation" style="${S.table}" cellspacing="0" cellpadding="0">
<tr><th style="${S.th}">finished (UTC)</th><th style="${S.th}">job</th><th style="${S.th}">error</th></tr>
${jobs.map((j) => `<tr><td style="${S.td};white-space:nowrap">${escapeHtml(j.finishedAt)}</td><td style="${S.td}">${escapeHtml(j.job)}${j.store ? ` (${escapeHtml(j.store)})` : ''}</td><td style="${S.td}">${html(j.error, ERROR_CHARS)}</td></tr>`).join('\n')}
</table>`;
}

function htmlMaintenance(s: StoreSection, quiet: boolean): string {
  const m = s.maintenance;
  const kv = (k: string, v: string) => `<tr><td style="${S.td};width:220px;color:#57606a">${k}</td><td style="${S.td}">${v}</td></tr>`;
  const findings = [...m.problems, ...m.notes]
    .map((f) => `<div style="${f.severity === 'error' ? S.bad : f.severity === 'warning' ? S.warn : ''}">${escapeHtml(findingText(f))}</div>`)
    .join('');
  const integrity = (m.problems.length === 0 ? `<span style="${S.ok}">no problems</span>` : `<span style="${S.bad}">${plural(m.problems.length, 'problem')}</span>`) + findings;
  const verdicts = m.awaitingPerson.total === 0
    ? 'none'
    : `<b>${m.awaitingPerson.total}</b>` + m.awaitingPerson.shown
        .map((v) => `<div><code style="${S.code}">${html(v.memoryId, 80)}</code> ${html(v.verdict)}${v.verifier ? ` by ${html(v.verifier, 80)}` : ''} <span style="${S.muted}">${html(v.checkedAt, 40)}</span>${v.evidence ? `: ${html(v.evidence, 300)}` : ''}${v.link ? reviewLinkHtml(v.link) : ''}</div>`)
        .join('');
  const failed = m.failedJobs.length === 0 ? `<span style="${S.ok}">none</span>` : htmlJobs(m.failedJobs);
  const counts = `rows ${m.rows}, live ${m.live} (gap ${m.rows - m.live})${quiet && s.review.due > 0 ? `, ${s.review.due} due for review` : ''}`;
  return `<h3 style="${S.h3}">Maintenance</h3>
<table role="presentation" style="${S.table}" cellspacing="0" cellpadding="0">
${kv('rows', counts)}
${kv('prune', escapeHtml(pruneText(s)))}
${kv('integrity', integrity)}
${kv('last good snapshot', escapeHtml(snapshotText(s)))}
${kv('drift verdicts awaiting a person', verdicts)}
${kv('failed jobs since the last digest', failed)}
</table>`;
}
