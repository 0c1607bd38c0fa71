import type { Command } from 'commander';
import type { AnyStoreHandle } from '../layouts/contract.js';
import type { Db } from '../store/sqlite.js';
import { usageError } from '../core/errors.js';
import { addStoreOptions, onAnyEngine, print, printJson, storeContext, type CommandContext, type StoreOptions } from './common.js';
import type { ReviewDecision, ReviewList } from '../drift/review.js';

/** The review functions, loaded when a review command runs. */
const reviewModule = () => import('../drift/review.js');

/** `review list|confirm|supersede|expire|delete`: the human side of drift re-verification. */
export function registerReviewCommands(program: Command): void {
  const review = program.command('review').description('the review queue: what drift could not settle, and a person\'s decisions');

  // Every engine: the store is reached through its engine and its layout's jobs there (withReview).
  onAnyEngine(addStoreOptions(review.command('list')))
    .description('rows due for review and what waits for a person, with the evidence')
    .option('--now <time>', 'as of this ISO-8601 time')
    .option('--json', 'print one JSON object')
    .action(async (opts: StoreOptions, cmd: Command) =>
      withReview(opts, cmd, false, async (ctx, store, state) => {
        const [{ listReview }, { maskDeep, maskSecretsSync }] = await Promise.all([reviewModule(), import('../text/credentials.js')]);
        const list = await listReview(store, state, ctx.config, ctx.now());
        // --json is exact; a person's terminal gets credentials masked (ids stay exact: they are typed back), with
        // the catalogue first, then each shown text again as the digest and the page mask it.
        if (opts.json) printJson(list);
        else printList(await maskDeep(list, new Set(['id', 'memoryId', 'store'])), maskSecretsSync);
      }),
    );

  const decide = (name: string, description: string) =>
    onAnyEngine(addStoreOptions(review.command(name).argument('<id>', 'memory id')))
      .description(description)
      .option('--now <time>', 'as of this ISO-8601 time')
      .option('--json', 'print the decision as JSON');

  decide('confirm', 'the fact still holds: confirmed_at = now').action(async (id: string, opts: StoreOptions, cmd: Command) =>
    withReview(opts, cmd, true, async (ctx, store, state) => report(await (await reviewModule()).confirmMemory(store, state, id, ctx.now()), opts)),
  );
  decide('supersede', 'replace the fact: a new row the old one points at (a Mastra working memory: its text, in place)')
    .requiredOption('--fact <text>', 'the corrected fact')
    .requiredOption('--source <text>', 'where the corrected fact comes from')
    .action(async (id: string, opts: StoreOptions & { fact: string; source: string }, cmd: Command) =>
      withReview(opts, cmd, true, async (ctx, store, state) => report(await (await reviewModule()).supersedeMemory(store, state, id, { fact: opts.fact, source: opts.source }, ctx.now()), opts)),
    );
  decide('expire', 'the fact decays after all: give it an expiry (prune deletes it then)')
    .requiredOption('--in <duration>', 'from now: 7d, 12h, 30m')
    .action(async (id: string, opts: StoreOptions & { in: string }, cmd: Command) =>
      withReview(opts, cmd, true, async (ctx, store, state) => report(await (await reviewModule()).expireMemory(store, state, id, opts.in, ctx.now()), opts)),
    );
  decide('delete', 'delete the row through both stores, with the older versions that point at it (a Mastra working memory: cleared)').action(async (id: string, opts: StoreOptions, cmd: Command) =>
    withReview(opts, cmd, true, async (ctx, store, state) => report(await (await reviewModule()).deleteMemory(store, state, id, ctx.now()), opts)),
  );
}

async function withReview(
  opts: StoreOptions,
  cmd: Command,
  writes: boolean,
  fn: (ctx: CommandContext, store: AnyStoreHandle, state: Db) => void | Promise<void>,
): Promise<void> {
  const ctx = await storeContext(opts, cmd);
  const [{ openStoreOnEngine }, { jobsOf }, { engineFor }, { openStateDb }, { expandHome }] = await Promise.all([
    import('../layouts/open.js'), import('../layouts/registry.js'), import('../engines/registry.js'), import('../state/state.js'), import('../config/config.js'),
  ]);
  const store = await openStoreOnEngine(ctx.config, ctx.storeName, { readonly: !writes });
  try {
    const action = cmd.name();
    const layout = await jobsOf(store);
    if (!layout.correct && action !== 'list' && action !== 'confirm') {
      throw usageError(`review ${action}: store ${store.name} is a ${layout.name} store, which memory-warden cannot supersede, expire or delete by review; change it through its own API (erase --ids deletes)`);
    }
    const state = openStateDb(expandHome(ctx.config.stateDb));
    try {
      if (writes) await (await engineFor(store.config)).assertReadable(store); // a person's decision is not written into a damaged store
      await fn(ctx, store, state);
    } finally {
      state.close();
    }
  } finally {
    await store.close();
  }
}

function report(d: ReviewDecision, opts: StoreOptions): void {
  if (opts.json) return printJson(d);
  const what = {
    confirm: `confirmed ${d.id}`,
    // A layout that keeps one text per memory replaces it in place: no new id.
    supersede: d.newId === undefined ? `replaced the text of ${d.id}` : `superseded ${d.id} by ${d.newId}`,
    expire: `${d.id} expires at ${d.expiresAt}`,
    delete: `deleted ${(d.deleted ?? []).join(', ')}`,
  }[d.action];
  print`${d.store}: ${what}${d.resolved > 0 ? ` (${d.resolved} waiting item(s) resolved)` : ''}`;
}

/** `masked`: the one masking of text a person sees (src/text/credentials.ts), for every value that came from the store. */
function printList(l: ReviewList, masked: (text: unknown) => string): void {
  // A row with no source says so as the digest does (mem0 records none on most paths), never as an empty bracket.
  const source = (s: string) => (s.trim() === '' ? '(none)' : masked(s));
  print`${l.store}: ${l.dueTotal} row(s) due for review, ${l.pending.length} waiting for a person (as of ${l.now})`;
  if (l.pending.length > 0) print`\nwaiting for a person:`;
  for (const p of l.pending) {
    const ev = (p.evidence ?? {}) as { reason?: string; previous?: { value?: unknown }; current?: { value?: unknown }; replacement?: { fact?: string } };
    print`  ${p.memoryId}  ${p.verdict}${p.verifier ? ` (${p.verifier})` : ''}  checked ${p.checkedAt}`;
    if (p.memory) print`      fact: ${masked(p.memory.fact)}\n      source: ${source(p.memory.source)}`;
    else print`      (the row no longer exists)`;
    if (ev.reason) print`      reason: ${masked(ev.reason)}`;
    if (ev.previous) print`      before: ${masked(JSON.stringify(ev.previous.value))}`;
    if (ev.current && 'value' in ev.current) print`      now: ${masked(JSON.stringify(ev.current.value))}`;
    if (ev.replacement?.fact) print`      proposed: ${masked(ev.replacement.fact)}`;
  }
  if (l.next.length > 0) print`\nnext drift run takes (${l.next.length}):`;
  for (const r of l.next) print`  ${r.id}  confirmed ${r.confirmed_at}  ${masked(r.fact)}  [${source(r.source)}]`;
}
