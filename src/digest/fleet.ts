import type { Config } from '../config/config.js';
import type { JobContext } from '../job/job.js';
import { hostOfStore, thisHost } from '../queue/hosts.js';
import { emptySection, type CollectOptions } from './collect.js';
import type { StoreSection } from './model.js';

/**
 * The digest of a fleet: each host's sections are collected on that host (its store files, its state db), as one
 * task per host routed to that host's workers; the digest job waits for them at most digest.hostTimeoutSeconds,
 * then renders and sends once. A host that did not answer gets a section per store saying so.
 */
export const DIGEST_SECTIONS_TASK = 'digest-sections';
// The task that collects them, run by each host's worker, is in ./sections-task.ts (with its payload's schema: a
// preview or a digest of this machine's stores loads no zod).

/** The hosts the configured stores live on, when there are several (a fleet); null when every store is on one. */
export function spansHosts(config: Config): string[] | null {
  const hosts = [...new Set(Object.keys(config.stores).map((s) => hostOfStore(config, s)))].sort();
  return hosts.length > 1 ? hosts : null;
}

/**
 * What collectDigest needs to reach stores on other hosts, or undefined when every store is here. Without a
 * worker (the CLI) they cannot be read: their sections say where they live.
 */
export function fleetSections(config: Config, ctx: Pick<JobContext, 'dispatch' | 'fleet' | 'signal'>, base: Pick<CollectOptions, 'scope' | 'period' | 'now' | 'storeStarts'>): CollectOptions['fleet'] {
  const here = ctx.fleet?.host ?? thisHost(config);
  const elsewhere = (store: string) => {
    const host = hostOfStore(config, store);
    return host === here ? null : host;
  };
  if (!Object.keys(config.stores).some((s) => elsewhere(s) !== null)) return undefined;
  return {
    elsewhere,
    async sections(stores) {
      const byHost = new Map<string, string[]>();
      for (const s of stores) byHost.set(elsewhere(s)!, [...(byHost.get(elsewhere(s)!) ?? []), s]);
      const hosts = [...byHost.keys()].sort();
      // Nothing of these stores is known: marked unknown, never shown as zero, and their period stays open.
      const missing = (host: string, why: string): StoreSection[] => byHost.get(host)!.map((s) => ({ ...emptySection(s, config.review.afterDays), error: why, unknown: true }));
      if (!ctx.dispatch) return hosts.flatMap((h) => missing(h, `on host ${h}: not read by this run (the worker collects every host's sections: memory-warden enqueue digest)`));
      const startsOf = (stores: string[]) => (base.storeStarts ? Object.fromEntries(stores.map((s) => [s, base.storeStarts![s] ?? base.period.start])) : undefined);
      const payloads = hosts.map((host) => ({ host, stores: byHost.get(host)!, scope: base.scope, period: base.period, starts: startsOf(byHost.get(host)!), now: base.now }));
      const outcomes = await ctx.dispatch.runTasks(DIGEST_SECTIONS_TASK, payloads, { signal: ctx.signal, timeoutMs: config.digest.hostTimeoutSeconds * 1000 });
      const out: StoreSection[] = [];
      for (const [i, host] of hosts.entries()) {
        const o = outcomes[i]!;
        if (o.ok) out.push(...(o.value as StoreSection[]));
        else {
          const seen = await ctx.fleet?.lastSeen(host).catch(() => null);
          out.push(...missing(host, `no report from host ${host} ${seen ? `since ${seen}` : '(no heartbeat from it that reads as one)'} (${o.error})`));
        }
      }
      return out;
    },
  };
}
