import type { Config } from '../config/config.js';
import { expandHome } from '../config/config.js';
import { openStateDb } from '../state/state.js';
import { openStoreOnEngine } from '../layouts/open.js';
import { jobsOf } from '../layouts/registry.js';
import { WardenError, coerceError } from '../core/errors.js';
import { asPerson, confirmMemory, deleteMemory, expireMemory, listReview, supersedeMemory, type ReviewDecision, type ReviewList } from '../drift/review.js';
import type { Instant } from '../time/instants.js';
import { maskSecrets, plain } from '../digest/untrusted.js';
import { seenState } from './seen.js';
import { pendingItems } from '../drift/record.js';
import { ALL_CORRECTIONS, type CorrectionAction, type CurrentMemory } from '../layouts/contract.js';
import { storeHistory, type DayFigures } from './history.js';

/**
 * The page's side of the review commands: the same functions `memory-warden review …` calls, one store handle and
 * one state db per request, the decision recorded as the signed-in person's.
 */
export interface DecisionForm {
  action: string;
  id: string;
  seen: string;
  fact?: string;
  source?: string;
  days?: string;
}

export type DecisionOutcome = { ok: true; decision: ReviewDecision } | { ok: false; status: 400 | 409 | 503; message: string };

/** What the page draws: the queue, and each due row read as `currentMemory` reads it (what a form is checked against). */
export interface Queue {
  list: ReviewList;
  /** In the queue's order; `row` null when the id no longer reads back (deleted meanwhile, or not valid text in the file). */
  due: { id: string; row: CurrentMemory }[];
  history: DayFigures[];
  /** The corrections the page offers for this store (none: confirm only). */
  corrections: readonly CorrectionAction[];
}
export type DrawnRow = NonNullable<CurrentMemory>;

export async function readQueue(config: Config, store: string, now: Instant): Promise<Queue> {
  // Through the store's engine: a SQLite file here, or a schema of a database every host reaches.
  const handle = await openStoreOnEngine(config, store, { readonly: true });
  try {
    const state = openStateDb(expandHome(config.stateDb));
    try {
      const list = await listReview(handle, state, config, now);
      const layout = await jobsOf(handle);
      // Drawn from the same read the form's fingerprint is made of, not from the queue's own read of the row.
      const due: Queue['due'] = [];
      for (const m of list.next) due.push({ id: m.id, row: await layout.currentMemory(handle, m.id) });
      return { list, due, history: await storeHistory(config, state, handle, now), corrections: layout.correct ? layout.corrects ?? ALL_CORRECTIONS : [] };
    } finally {
      state.close();
    }
  } finally {
    await handle.close();
  }
}

/**
 * A delete is asked twice: its first form brings the page that says what goes (the row and the older versions
 * behind it), whose own form then deletes. The row as it reads now, if it still reads as the first form was drawn.
 */
export async function deletePlan(config: Config, store: string, form: DecisionForm): Promise<{ ok: true; row: DrawnRow } | { ok: false; status: 400 | 409; message: string }> {
  const handle = await openStoreOnEngine(config, store, { readonly: true });
  try {
    const layout = await jobsOf(handle);
    if (!layout.correct) return { ok: false, status: 400, message: `Store ${store} cannot be corrected here. Nothing changed.` };
    const state = openStateDb(expandHome(config.stateDb));
    try {
      const row = await layout.currentMemory(handle, form.id);
      const stale = staleMessage(form, seenState(row, pendingItems(state, store, form.id).map((p) => p.id)));
      return stale || !row ? { ok: false, status: 409, message: stale ?? changedText(form.id) } : { ok: true, row };
    } finally {
      state.close();
    }
  } finally {
    await handle.close();
  }
}

/** Thrown by the guard, inside the decision's transaction: the row no longer reads as the page showed it. */
class DrawnBefore extends Error {}

export async function decide(config: Config, store: string, user: string, form: DecisionForm, now: Instant): Promise<DecisionOutcome> {
  const handle = await openStoreOnEngine(config, store);
  try {
    const layout = await jobsOf(handle);
    if (!layout.correct && form.action !== 'confirm') {
      return { ok: false, status: 400, message: `Store ${store} is a ${layout.name} store: only confirm here; change it through its own API. Nothing changed.` };
    }
    const state = openStateDb(expandHome(config.stateDb));
    try {
      // The form was drawn against this state of the row and of what waits on it: checked now, to say why early,
      // and again by the layout just before it writes (where it has a transaction, inside it).
      const seen = (row: CurrentMemory) => seenState(row, pendingItems(state, store, form.id).map((p) => p.id));
      const stale = staleMessage(form, seen(await layout.currentMemory(handle, form.id)));
      if (stale) return { ok: false, status: 409, message: stale };
      const guard = (row: CurrentMemory) => {
        if (seen(row) !== form.seen) throw new DrawnBefore();
      };
      const run = (): Promise<ReviewDecision> => {
        switch (form.action) {
          case 'confirm': return confirmMemory(handle, state, form.id, now, { guard });
          case 'supersede': return supersedeMemory(handle, state, form.id, { fact: form.fact ?? '', source: form.source ?? '' }, now, { guard });
          case 'expire': {
            const days = Number(form.days);
            if (!Number.isInteger(days) || days < 1 || days > 3650) throw new WardenError('usage', `expire: "${form.days ?? ''}" is not a whole number of days from 1 to 3650`);
            return expireMemory(handle, state, form.id, `${days}d`, now, { guard });
          }
          case 'delete': return deleteMemory(handle, state, form.id, now, { guard });
          default: throw new WardenError('usage', `unknown decision "${form.action}"`);
        }
      };
      return { ok: true, decision: await asPerson(user, run) };
    } catch (err) {
      if (err instanceof DrawnBefore) return { ok: false, status: 409, message: changedText(form.id) };
      const e = coerceError(err);
      if (e.kind === 'usage') return { ok: false, status: 409, message: `${maskSecrets(e.message)}. Nothing changed.` };
      // A prune or snapshot holding the store: the decision was not made, and can simply be made again.
      if (e.transient) return { ok: false, status: 503, message: `The store is busy (${e.message.split('\n')[0]}). Nothing changed; try again in a minute.` };
      throw err;
    } finally {
      state.close();
    }
  } finally {
    await handle.close();
  }
}

const changedText = (id: string) =>
  `Memory ${plain(id, 80)} changed since this page was drawn (a decision here, in another tab or by the command line, or the agent rewrote it). Nothing changed; the page shows it as it is now.`;

/** Why the form cannot be acted on as drawn, or undefined. A row that is not there is not said to be decided. */
function staleMessage(form: DecisionForm, now: string): string | undefined {
  if (now === form.seen) return undefined;
  if (now === 'gone') return `There is no memory ${plain(form.id, 80)} in the store now: it was deleted since this page was drawn, or its id does not read back exactly from the store file. Nothing changed.`;
  return changedText(form.id);
}

export function decisionText(d: ReviewDecision): string {
  const id = plain(d.id, 80);
  const what = {
    confirm: `Confirmed ${id}.`,
    supersede: d.newId === undefined ? `Replaced the text of ${id}.` : `Superseded ${id} by ${d.newId}.`,
    expire: `${id} expires at ${d.expiresAt} UTC.`,
    delete: `Deleted ${plain(d.deleted?.join(', '), 400)}.`,
  }[d.action];
  return `${what}${d.resolved > 0 ? ` ${d.resolved} waiting item(s) resolved.` : ''}`;
}
