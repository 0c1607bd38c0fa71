import type { Config } from '../config.js';
import { expandHome } from '../config.js';
import { openStateDb } from '../state.js';
import { openStore } from '../layouts/open.js';
import { layoutOf } from '../layouts/registry.js';
import { WardenError, coerceError } from '../errors.js';
import { asPerson, confirmMemory, deleteMemory, expireMemory, listReview, supersedeMemory, type ReviewDecision, type ReviewList } from '../drift/review.js';
import type { Instant } from '../time.js';
import { clip, plain } from '../digest/untrusted.js';
import { seenState } from './pages.js';
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

export async function readQueue(config: Config, store: string, now: Instant): Promise<{ list: ReviewList; history: DayFigures[]; corrections: boolean }> {
  const handle = openStore(config, store, { readonly: true });
  try {
    const state = openStateDb(expandHome(config.stateDb));
    try {
      const list = await listReview(handle, state, config, now);
      return { list, history: await storeHistory(config, state, handle, now), corrections: layoutOf(handle).correct !== undefined };
    } finally {
      state.close();
    }
  } finally {
    handle.close();
  }
}

export async function decide(config: Config, store: string, user: string, form: DecisionForm, now: Instant): Promise<DecisionOutcome> {
  const handle = openStore(config, store);
  try {
    const layout = layoutOf(handle);
    if (!layout.correct && form.action !== 'confirm') {
      return { ok: false, status: 400, message: `Store ${store} is a ${layout.name} store: only confirm here; change it through its own API. Nothing changed.` };
    }
    // The form was drawn against this state of the row; if it moved since, someone decided already.
    if (seenState(layout.currentMemory(handle, form.id)) !== form.seen) {
      return { ok: false, status: 409, message: `Memory ${plain(clip(form.id, 80))} was decided already (here, in another tab or by the command line) since this page was drawn. Nothing changed.` };
    }
    const state = openStateDb(expandHome(config.stateDb));
    try {
      const run = (): Promise<ReviewDecision> => {
        switch (form.action) {
          case 'confirm': return confirmMemory(handle, state, form.id, now);
          case 'supersede': return supersedeMemory(handle, state, form.id, { fact: form.fact ?? '', source: form.source ?? '' }, now);
          case 'expire': {
            const days = Number(form.days);
            if (!Number.isInteger(days) || days < 1 || days > 3650) throw new WardenError('usage', `expire: "${form.days ?? ''}" is not a whole number of days from 1 to 3650`);
            return expireMemory(handle, state, form.id, `${days}d`, now);
          }
          case 'delete': return deleteMemory(handle, state, form.id, now);
          default: throw new WardenError('usage', `unknown decision "${form.action}"`);
        }
      };
      return { ok: true, decision: await asPerson(user, run) };
    } catch (err) {
      const e = coerceError(err);
      if (e.kind === 'usage') return { ok: false, status: 409, message: `${e.message}. Nothing changed.` };
      // A prune or snapshot holding the store: the decision was not made, and can simply be made again.
      if (e.transient) return { ok: false, status: 503, message: `The store is busy (${e.message.split('\n')[0]}). Nothing changed; try again in a minute.` };
      throw err;
    } finally {
      state.close();
    }
  } finally {
    handle.close();
  }
}

export function decisionText(d: ReviewDecision): string {
  const id = plain(clip(d.id, 80));
  const what = {
    confirm: `Confirmed ${id}.`,
    supersede: `Superseded ${id} by ${d.newId}.`,
    expire: `${id} expires at ${d.expiresAt} UTC.`,
    delete: `Deleted ${plain(clip(d.deleted?.join(', '), 400))}.`,
  }[d.action];
  return `${what}${d.resolved > 0 ? ` ${d.resolved} waiting item(s) resolved.` : ''}`;
}
