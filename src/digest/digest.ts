import { writeRegularFile } from '../core/read-file.js';
import type { Config } from '../config/config.js';
import type { RedisConfig } from '../queue/config.js';
import { expandHome } from '../config/read.js';
import type { JobContext } from '../job/job.js';
import { silentLogger, type Logger } from '../log/logger.js';
import { openStateDb } from '../state/state.js';
import { coerceError, configError, storeError, usageError, type WardenError } from '../core/errors.js';
import { openStoreOnEngine } from '../layouts/open.js';
import { engineFor } from '../engines/registry.js';
import { parseInstant, toCanonical, type Instant } from '../time/instants.js';
import { collectDigest } from './collect.js';
import { fleetSections } from './fleet.js';
import { renderDigest, renderHtml, renderSubject, renderText, type RenderedDigest } from './render.js';
import type { DigestModel } from './model.js';
import { digestTimeZone, listKey } from './deliveries.js';
import { claimOrWait, redisLedger, stateLedger, type DeliveryLedger } from './ledger.js';
import { spansHosts } from './fleet.js';
import { hostOfStore, thisHost } from '../queue/hosts.js';
import type { Redis } from 'ioredis';

export const ALL_STORES = 'all stores';

export interface DigestGroup {
  /** `all stores`, or one store's name (perStore), or the chosen stores joined by `,`. */
  scope: string;
  stores: string[];
}

/** Which emails this run sends: one covering the chosen stores, or one per store. Unknown names are refused. */
export function digestGroups(config: Config, chosen?: string[]): DigestGroup[] {
  const all = Object.keys(config.stores);
  if (all.length === 0) throw configError('stores: none configured; the digest has nothing to report (or use digest --preview --db PATH)');
  const names = chosen && chosen.length > 0 ? [...new Set(chosen)] : all;
  const unknown = names.filter((n) => !config.stores[n]);
  if (unknown.length > 0) throw usageError(`no store named ${unknown.map((n) => `"${n}"`).join(', ')} in config (stores: ${all.join(', ') || 'none'})`);
  if (config.digest.perStore) return names.map((n) => ({ scope: n, stores: [n] }));
  const everything = names.length === all.length;
  return [{ scope: everything ? ALL_STORES : [...names].sort().join(','), stores: everything ? all : names }];
}

/** What the scheduled digest's emails are labelled by (one covering every store, or one per store); none without stores. */
export function digestScopes(config: Config): string[] {
  return Object.keys(config.stores).length === 0 ? [] : digestGroups(config).map((g) => g.scope);
}

/** The end of a period: now − settle, on a whole second (periods are stored as canonical text). */
export function periodEnd(config: Config, now: Instant): Instant {
  return Math.floor((now - config.digest.settleSeconds * 1000) / 1000) * 1000;
}

export interface DeliveryResult {
  scope: string;
  day: string;
  /** sent: the server accepted it now; quiet: nothing new and allQuiet is off; already-sent / in-progress: not sent by this run. */
  status: 'sent' | 'quiet' | 'already-sent' | 'in-progress' | 'failed';
  periodStart: string;
  periodEnd: string;
  messageId: string;
  newRows?: number;
  flagged?: number;
  error?: string;
}

export interface DigestResult {
  deliveries: DeliveryResult[];
}

/**
 * The digest job: for each email (one, or one per store), claim (list, day), collect, render, send, record.
 * Config is checked before anything is claimed. Every email is attempted; the first failure is thrown after, a
 * transient one when any is transient (so the retry sends what is still unsent, and nothing that was sent).
 */
export async function runDigest(payload: { stores?: string[] }, ctx: JobContext): Promise<DigestResult> {
  const { config, log } = ctx;
  const groups = digestGroups(config, payload.stores);
  const fleet = spansHosts(config);
  // Where the stores live decides before anything else (the mail settings among it): without the worker's task
  // queues (the CLI) only this machine's stores can be read.
  if (fleet && !ctx.dispatch) {
    throw usageError(`digest: the stores live on several hosts (${fleet.join(', ')}); each host's sections are read there by the worker: memory-warden enqueue digest`);
  }
  if (!ctx.dispatch) {
    const here = thisHost(config);
    const away = [...new Set(groups.flatMap((g) => g.stores).map((s) => hostOfStore(config, s)))].filter((h) => h !== here);
    if (away.length > 0) throw usageError(`digest: the stores live on host ${away.join(', ')}, and this machine is ${here}; the digest is read there by its worker: memory-warden enqueue digest`);
  }
  const { checkSendConfig, createTransport, sendDigestMail } = await import('./send.js'); // the mailer: sending only
  const cfg = checkSendConfig(config);
  // Only the stores on this host can be opened here; the others' hosts read theirs (src/digest/fleet.ts).
  const here = ctx.fleet?.host ?? thisHost(config);
  await assertStoresReadable(config, [...new Set(groups.flatMap((g) => g.stores))].filter((s) => hostOfStore(config, s) === here));
  const state = openStateDb(expandHome(config.stateDb));
  // A fleet keeps the exactly-once record in Redis, where every machine's worker finds it.
  const redis = fleet ? (ctx.fleet?.redis ?? (await connectRedis(config.redis, log))) : undefined;
  const ledger = redis ? await fleetLedger(redis, config.redis) : stateLedger(state);
  const transport = createTransport(cfg.smtp);
  const results: DeliveryResult[] = [];
  const errors: WardenError[] = [];
  try {
    for (const group of groups) {
      await pastRecordedSecond(state, ctx);
      const now = ctx.now();
      const claim = await claimOrWait(ledger, {
        key: listKey(cfg.to, group.scope),
        now,
        end: periodEnd(config, now),
        firstPeriodMs: config.digest.firstPeriodHours * 3_600_000,
        claimMs: config.digest.claimMinutes * 60_000,
        timeZone: digestTimeZone(config),
      }, ctx);
      const d = claim.delivery;
      const base = { scope: group.scope, day: d.day, periodStart: d.period_start, periodEnd: d.period_end, messageId: d.message_id };
      if (claim.kind !== 'claimed') {
        log.info({ scope: group.scope, day: d.day, status: claim.kind }, 'digest not sent by this run');
        results.push({ ...base, status: claim.kind });
        continue;
      }
      if (claim.takenOver) log.warn({ scope: group.scope, day: d.day, messageId: d.message_id }, 'digest claim taken over from a run that vanished; sending again with the same Message-ID');
      try {
        const period = { start: parseInstant(d.period_start)!, end: parseInstant(d.period_end)! };
        // A store an earlier digest had no report of starts where that one could not list it.
        const storeStarts = await ledger.storeStarts(d.list_key, group.stores, period.start);
        const model = await collectDigest({
          config, state, stores: group.stores, scope: group.scope, now, ctx, period, storeStarts,
          fleet: fleetSections(config, ctx, { scope: group.scope, period, now, storeStarts }),
        });
        const summary = summarize(model);
        // Only a store that was read is reported: a silent host's stay open for the next digest.
        const reported = model.stores.filter((s) => !s.error).map((s) => s.name);
        if (model.quiet && !config.digest.allQuiet) {
          await ledger.markQuiet(d, claim.token, ctx.now());
          await ledger.closeStores(d.list_key, reported, period.end);
          log.info({ scope: group.scope, day: d.day }, 'digest: all quiet, nothing sent (allQuiet is off)');
          results.push({ ...base, status: 'quiet', ...summary });
          continue;
        }
        const rendered = renderDigest(model, { prefix: config.digest.subject });
        const accepted = await sendDigestMail(transport, cfg, { ...rendered, messageId: d.message_id, period: { start: d.period_start, end: d.period_end } }, ctx.signal);
        await ledger.markSent(d, ctx.now(), accepted.response, summary);
        await ledger.closeStores(d.list_key, reported, period.end);
        log.info({ scope: group.scope, day: d.day, ...summary, recipients: accepted.accepted.length }, 'digest sent');
        results.push({ ...base, status: 'sent', ...summary });
      } catch (err) {
        const e = coerceError(err, group.scope); // the job names itself ("digest: …")
        await ledger.markFailed(d, claim.token, e.message);
        log.error({ scope: group.scope, day: d.day, err: e.message, transient: e.transient }, 'digest not sent');
        results.push({ ...base, status: 'failed', error: e.message });
        errors.push(e);
      }
    }
  } finally {
    transport.close();
    state.close();
    if (redis && redis !== ctx.fleet?.redis) await redis.quit().catch(() => redis.disconnect());
  }
  if (errors.length > 0) throw errors.find((e) => e.transient) ?? errors[0]!;
  return { deliveries: results };
}

/**
 * Job runs are recorded to the second, and a digest reports those that finished before the second it is made in
 * (src/digest/collect.ts runsPeriod). A run that finished in the current second (a prune a moment before) would
 * fall after the window and wait a day: the digest is then made in the next second, so it reports that run, and
 * a run that ends after it is made goes in the next digest. Nothing waits when no run ended this second, or when
 * the clock is given (`--now`).
 */
async function pastRecordedSecond(state: ReturnType<typeof openStateDb>, ctx: JobContext): Promise<void> {
  const now = ctx.now();
  if (Math.abs(now - Date.now()) > 1000) return; // a clock given, not the machine's
  const second = Math.floor(now / 1000) * 1000;
  if (!state.prepare(`SELECT 1 FROM job_runs WHERE finished_at >= ? LIMIT 1`).get(toCanonical(second))) return;
  await new Promise<void>((resolve) => {
    const done = () => (clearTimeout(t), ctx.signal.removeEventListener('abort', done), resolve());
    const t = setTimeout(done, second + 1000 - now + 1);
    ctx.signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Before anything is claimed: every store the digest covers opens, has its schema and passes its engine's quick check
 * (SQLite's quick_check; StoreEngine.assertReadable). A
 * digest that cannot read a store fails as a whole (the job's failure is reported), rather than claiming the
 * day and mailing a hole.
 */
async function assertStoresReadable(config: Config, names: string[]): Promise<void> {
  for (const name of names) {
    const store = await openStoreOnEngine(config, name, { readonly: true });
    try {
      await (await engineFor(store.config)).assertReadable(store);
    } finally {
      await store.close();
    }
  }
}

/** Redis and its client are loaded only for a fleet's digest (stores on several hosts). */
async function connectRedis(target: RedisConfig, log?: Logger): Promise<Redis> {
  return (await import('../queue/connection.js')).connectRedis(target, log);
}

/**
 * A fleet's exactly-once record, in Redis. The queue's config module (its schemas, and zod with them) is loaded only
 * here: a digest of this machine's stores given no config file loads no schema (test/cli-startup.test.ts).
 */
async function fleetLedger(redis: Redis, target: RedisConfig): Promise<DeliveryLedger> {
  const { claimDurability } = await import('../queue/config.js');
  return redisLedger(redis, target.prefix, claimDurability(target));
}

function summarize(model: DigestModel): { newRows: number; flagged: number } {
  return {
    newRows: model.stores.reduce((n, s) => n + s.newRows.total, 0),
    flagged: model.stores.reduce((n, s) => n + s.newRows.flagged, 0),
  };
}

export interface PreviewOptions {
  now?: Instant;
  stores?: string[];
  log?: Logger;
  /** Write the HTML part here. */
  out?: string;
}

export interface Preview extends RenderedDigest {
  model: DigestModel;
}

/**
 * The digest as it would be sent now, without sending or recording anything: one email covering the chosen
 * stores, from where the last sent digest of the configured list ended. Needs no SMTP config.
 */
export async function previewDigest(config: Config, opts: PreviewOptions = {}): Promise<Preview> {
  const now = opts.now ?? Date.now();
  const groups = digestGroups({ ...config, digest: { ...config.digest, perStore: false } }, opts.stores);
  const group = groups[0]!;
  const state = openStateDb(expandHome(config.stateDb));
  try {
    // Nothing is recorded, so no settle margin: a row written a moment ago shows in the preview.
    const end = now;
    const firstMs = config.digest.firstPeriodHours * 3_600_000;
    const keys = config.digest.perStore ? group.stores : [group.scope];
    const redis = spansHosts(config) ? await connectRedis(config.redis, opts.log) : undefined;
    const ledger = redis ? await fleetLedger(redis, config.redis) : stateLedger(state);
    const keyOf = (scope: string) => listKey(config.digest.to, scope);
    const read = async () => {
      const starts = await Promise.all(keys.map((scope) => ledger.periodStart(keyOf(scope), end, firstMs)));
      const start = Math.min(...starts);
      // Read only (record false): the preview writes nothing.
      return { start, storeStarts: config.digest.perStore ? undefined : await ledger.storeStarts(keyOf(group.scope), group.stores, start, false) };
    };
    const { start, storeStarts } = await read().finally(() => redis?.disconnect());
    const signal = new AbortController().signal;
    const model = await collectDigest({
      config, state, stores: group.stores, scope: group.scope, now, period: { start, end }, storeStarts, recordTexts: false,
      ctx: { log: opts.log ?? silentLogger, signal },
      fleet: fleetSections(config, { signal }, { scope: group.scope, period: { start, end }, now, storeStarts }),
    });
    // A store of this host that cannot be read fails the preview; another host's is read only by the worker.
    const unread = model.stores.find((s) => s.error && hostOfStore(config, s.name) === thisHost(config));
    if (unread) throw storeError(`digest preview: store ${unread.name}: ${unread.error}`);
    const prefix = config.digest.subject;
    if (opts.out === undefined) {
      // The text part alone, as the command prints it: the HTML part is rendered only where it is read.
      let html: string | undefined;
      return { subject: renderSubject(model, prefix), text: renderText(model), model, get html() { return (html ??= renderHtml(model)); } };
    }
    const rendered = renderDigest(model, { prefix });
    try {
      writeRegularFile(opts.out, rendered.html);
    } catch (err) {
      throw usageError(`digest --out ${opts.out}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    return { ...rendered, model };
  } finally {
    state.close();
  }
}
