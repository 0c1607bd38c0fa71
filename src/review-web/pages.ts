import type { PendingItem } from '../drift/review.js';
import type { DrawnRow, Queue } from './decide.js';
import { seenState } from './seen.js';
import { encodeFormId } from './form-id.js';
import { escapeHtml, fieldValue, html, idHoldsSecret } from '../digest/untrusted.js';
import { DAY_MS, parseInstant, type Instant } from '../time/instants.js';
import { itemAnchor } from '../links/tokens.js';
import { activityChart, gapChart, legend } from './chart.js';
import type { CorrectionAction } from '../layouts/contract.js';

/**
 * Plain server-rendered HTML. Store text goes through the digest's own `html()` (one line, defanged, escaped) so
 * it reads the same inert way as in the email; our own values go through `escapeHtml`. No inline script or style:
 * the CSP forbids both, and the stylesheet is /static/review.css.
 */
export interface PageContext {
  /** The path the page lives under behind a proxy (review.url's path), '' at the root. */
  base: string;
  store: string;
  user: string;
  /** The corrections offered beside Confirm (none: confirm only). */
  corrections: readonly CorrectionAction[];
  now: Instant;
  /** A fresh one-time nonce for each form. */
  nonce: () => string;
}

export function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><title>${escapeHtml(title)}</title><link rel="stylesheet" href="STATIC_CSS"></head>
<body><main>${body}</main></body></html>`;
}

/** A page that explains (an expired link, a refused form): a heading and a paragraph, nothing from the request. */
export function messagePage(base: string, title: string, text: string, back?: string): string {
  const link = back ? `<p><a href="${escapeHtml(back)}">Back to the review queue</a></p>` : '';
  return withBase(base, page(title, `<h1>${escapeHtml(title)}</h1><p>${escapeHtml(text)}</p>${link}`));
}

const withBase = (base: string, doc: string) => doc.replace('STATIC_CSS', `${escapeHtml(base)}/static/review.css`);

export function loginPage(base: string, store: string, token: string, loginToken: string, mode: 'password' | 'users', failed: boolean): string {
  const who = mode === 'users' ? 'Your name' : 'Your name (recorded with your decisions)';
  const body = `<h1>Review ${escapeHtml(store)}</h1>
${failed ? '<p class="bad">Wrong name or password.</p>' : ''}
<form method="post" action="${escapeHtml(base)}/login" class="login">
<input type="hidden" name="t" value="${escapeHtml(token)}"><input type="hidden" name="csrf" value="${escapeHtml(loginToken)}">
<label>${who} <input name="user" autocomplete="username" required maxlength="64"></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">Sign in</button>
</form>`;
  return withBase(base, page(`Sign in: ${store}`, body));
}

const ageDays = (confirmedAt: string, now: Instant) => {
  const t = parseInstant(confirmedAt);
  return t === null ? '?' : String(Math.max(0, Math.floor((now - t) / DAY_MS)));
};

/** What a card offers instead of forms when its id looks like a credential (a form would carry it, encoded). */
const ID_HOLDS_SECRET = '<div class="forms"><p class="muted">This row\'s id looks like a credential: no form here carries it. Decide it in a terminal, where memory-warden review list shows it.</p></div>';

const decideUrl = (ctx: PageContext) => `${escapeHtml(ctx.base)}/store/${escapeHtml(ctx.store)}/decide`;
const hiddenFor = (ctx: PageContext, id: string, seen: string) => (a: string) =>
  `<input type="hidden" name="csrf" value="${ctx.nonce()}"><input type="hidden" name="id" value="${encodeFormId(id)}"><input type="hidden" name="seen" value="${escapeHtml(seen)}"><input type="hidden" name="action" value="${a}">`;

function forms(ctx: PageContext, id: string, seen: string, proposed = ''): string {
  if (idHoldsSecret(id)) return ID_HOLDS_SECRET;
  const action = decideUrl(ctx);
  const hidden = hiddenFor(ctx, id, seen);
  const confirm = `<form method="post" action="${action}" class="confirm">${hidden('confirm')}<button type="submit">Confirm</button></form>`;
  if (ctx.corrections.length === 0) return `<div class="forms">${confirm}<p class="muted">mem0 store: correct or delete it through mem0 (erase --ids deletes).</p></div>`;
  // Drawn only when offered: each form spends a one-time nonce of the session.
  const offered: Record<CorrectionAction, () => string> = {
    supersede: () => `<form method="post" action="${action}" class="supersede">${hidden('supersede')}<label>New fact <textarea name="fact" required maxlength="10000" rows="2">${fieldValue(proposed)}</textarea></label><label>Source <input name="source" required maxlength="2000" placeholder="where the new fact comes from"></label><button type="submit">Supersede</button></form>`,
    expire: () => `<form method="post" action="${action}" class="expire">${hidden('expire')}<label>Expire in <input name="days" type="number" min="1" max="3650" value="7" required> days</label><button type="submit">Expire</button></form>`,
    delete: () => `<form method="post" action="${action}" class="delete">${hidden('delete')}<button type="submit" class="danger">Delete…</button></form>`,
  };
  return `<div class="forms">${confirm}
${(['supersede', 'expire', 'delete'] as const).filter((a) => ctx.corrections.includes(a)).map((a) => offered[a]()).join('\n')}
</div>`;
}

function fields(m: DrawnRow, now: Instant): string {
  return `<dl>
<dt>fact</dt><dd class="fact">${html(m.fact, 2000)}</dd>
<dt>subject</dt><dd>${html(m.subject, 300)}</dd>
<dt>source</dt><dd>${m.source.trim() === '' ? '<i class="bad">none</i>' : html(m.source, 500)}</dd>
<dt>confirmed</dt><dd>${html(m.confirmed_at, 40)} (${ageDays(m.confirmed_at, now)} days ago)</dd>
${m.expires_at === null ? '' : `<dt>expires</dt><dd class="expires">${html(m.expires_at, 40)}${inDays(m.expires_at, now)}</dd>`}
${(m.olderVersions ?? []).length === 0 ? '' : `<dt>older</dt><dd>${m.olderVersions!.length} older version(s) lead to it (a delete takes them too)</dd>`}
</dl>`;
}

/** ` (in N days)` for an expiry that reads as an instant; nothing for one that does not (shown as stored). */
function inDays(expiresAt: string, now: Instant): string {
  const t = parseInstant(expiresAt);
  if (t === null) return ' (not a time: it never expires)';
  const days = Math.ceil((t - now) / DAY_MS);
  return days <= 0 ? ' (expired: the next prune deletes it)' : ` (in ${days} day${days === 1 ? '' : 's'})`;
}

/** Asked before a delete: what goes (the row, the older versions behind it), and the button that deletes. */
export function confirmDeletePage(ctx: PageContext, seen: string, m: DrawnRow): string {
  const older = m.olderVersions ?? [];
  const list = older.length === 0 ? '' : `<p>With it go the ${older.length} older version(s) whose chain leads to it:</p><ul>${older.slice(0, 50).map((o) => `<li><code>${html(o.id, 80)}</code> ${html(o.fact, 200)}</li>`).join('')}</ul>${older.length > 50 ? `<p class="muted">and ${older.length - 50} more.</p>` : ''}`;
  const body = `<h1>Delete <code>${html(m.id, 80)}</code>?</h1>
<p>This deletes the memory from the store and from its vector store where it has one. It cannot be undone here (a snapshot taken before holds it).</p>
<article class="item">${fields(m, ctx.now)}</article>${list}
${idHoldsSecret(m.id) ? ID_HOLDS_SECRET : `<div class="forms"><form method="post" action="${decideUrl(ctx)}" class="delete-confirmed">${hiddenFor(ctx, m.id, seen)('delete')}<input type="hidden" name="confirmed" value="yes"><button type="submit" class="danger">Delete for good</button></form></div>`}
<p><a href="${escapeHtml(ctx.base)}/store/${escapeHtml(ctx.store)}">Cancel: back to the review queue</a></p>`;
  return withBase(ctx.base, page(`Delete? ${ctx.store}`, body));
}

function evidence(p: PendingItem): string {
  const ev = (p.evidence ?? {}) as { reason?: unknown; previous?: { value?: unknown }; current?: { value?: unknown }; replacement?: { fact?: unknown } };
  const rows: string[] = [];
  if (ev.reason) rows.push(`<dt>reason</dt><dd>${html(ev.reason, 500)}</dd>`);
  if (ev.previous) rows.push(`<dt>before</dt><dd>${html(JSON.stringify(ev.previous.value), 500)}</dd>`);
  if (ev.current && 'value' in ev.current) rows.push(`<dt>now</dt><dd>${html(JSON.stringify(ev.current.value), 500)}</dd>`);
  if (ev.replacement?.fact) rows.push(`<dt>proposed</dt><dd>${html(ev.replacement.fact, 500)}</dd>`);
  return rows.length > 0 ? `<dl class="evidence">${rows.join('')}</dl>` : '';
}

/** The verdicts waiting on each memory: part of what a form was drawn against. */
function waitingByMemory(pending: PendingItem[]): Map<string, number[]> {
  const by = new Map<string, number[]>();
  for (const p of pending) by.set(p.memoryId, [...(by.get(p.memoryId) ?? []), p.id]);
  return by;
}

function pendingCard(ctx: PageContext, p: PendingItem, waiting: number[]): string {
  const head = `<h3><code>${html(p.memoryId, 80)}</code> <span class="verdict">${html(p.verdict)}</span>${p.verifier ? ` by ${html(p.verifier, 80)}` : ''} <span class="muted">checked ${html(p.checkedAt, 40)}</span></h3>`;
  // A verifier's proposed replacement is offered as the new fact; the person still names its source.
  const proposed = (p.evidence as { replacement?: { fact?: unknown } } | null)?.replacement?.fact;
  const body = p.memory ? fields(p.memory, ctx.now) + evidence(p) + forms(ctx, p.memoryId, seenState(p.memory, waiting), typeof proposed === 'string' ? proposed : '') : `${evidence(p)}${NOT_FOUND}`;
  return `<article class="item pending" id="${itemAnchor(p.memoryId)}">${head}${body}</article>`;
}

/** A listed id that reads no row: nothing the page could decide (and nothing said to be decided). */
const NOT_FOUND = '<p class="muted">No row reads under this id now: it was deleted, or its id is not valid text in the store file (decide it there).</p>';

function dueCard(ctx: PageContext, { id, row }: Queue['due'][number]): string {
  // Due rows are not waiting for a person (the queue leaves those out): nothing waits on them as drawn.
  const body = row ? fields(row, ctx.now) + forms(ctx, id, seenState(row, [])) : NOT_FOUND;
  return `<article class="item due" id="${itemAnchor(id)}"><h3><code>${html(id, 80)}</code></h3>${body}</article>`;
}

export function storePage(ctx: PageContext, { list, due, history }: Pick<Queue, 'list' | 'due' | 'history'>, notice?: string): string {
  // One card per memory, with its latest verdict's evidence (a decision resolves all of them at once).
  const waiting = waitingByMemory(list.pending);
  const seenIds = new Set<string>();
  const pending = [...list.pending].reverse().filter((p) => !seenIds.has(p.memoryId) && seenIds.add(p.memoryId)).reverse();
  const body = `<header><h1>Review ${escapeHtml(ctx.store)}</h1><p class="muted">Signed in as ${html(ctx.user, 80)}. As of ${escapeHtml(list.now)} UTC. Text from the store is shown defanged.</p></header>
${notice ? `<p class="notice">${escapeHtml(notice)}</p>` : ''}
<section><h2>Waiting for a person (${pending.length})</h2>${pending.length === 0 ? '<p>Nothing waits for a person.</p>' : pending.map((p) => pendingCard(ctx, p, waiting.get(p.memoryId)!)).join('\n')}</section>
<section><h2>Due for review: ${list.dueTotal}</h2><p class="muted">Live rows confirmed long ago (those waiting above included). The next drift run takes these ${list.next.length}, oldest first.</p>${due.map((d) => dueCard(ctx, d)).join('\n')}</section>
<section><h2>Last 30 days</h2>${legend()}${gapChart(history)}${activityChart(history)}</section>`;
  return withBase(ctx.base, page(`Review: ${ctx.store}`, body));
}
