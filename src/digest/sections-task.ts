import { z } from '../vendor/zod.js';
import type { Config } from '../config/config.js';
import { expandHome } from '../config/read.js';
import type { TaskKind } from '../queue/tasks.js';
import { openStateDb } from '../state/state.js';
import { usageError } from '../core/errors.js';
import { collectSections } from './collect.js';
import type { StoreSection } from './model.js';
import { DIGEST_SECTIONS_TASK } from './fleet.js';

/** What the digest job sends each host (src/digest/fleet.ts). */
const payloadSchema = z.strictObject({
  host: z.string().min(1),
  stores: z.array(z.string().min(1)).min(1),
  scope: z.string(),
  period: z.strictObject({ start: z.number(), end: z.number() }),
  /** Stores whose section starts earlier (an earlier digest had no report of them). */
  starts: z.record(z.string(), z.number()).optional(),
  now: z.number(),
});

/** A fleet digest's task on one host: that host's sections, read there (its store files, its state db). */
export function createDigestSectionsTask(config: Config): TaskKind {
  return {
    name: DIGEST_SECTIONS_TASK,
    route: 'host',
    concurrency: 1,
    async run(raw, ctx): Promise<StoreSection[]> {
      const r = payloadSchema.safeParse(raw);
      if (!r.success) throw usageError(`${DIGEST_SECTIONS_TASK} payload: ${r.error.issues[0]!.message}`);
      const p = r.data;
      const state = openStateDb(expandHome(config.stateDb));
      try {
        return await collectSections({ config, state, stores: p.stores, scope: p.scope, period: p.period, storeStarts: p.starts, now: p.now, ctx });
      } finally {
        state.close();
      }
    },
  };
}

