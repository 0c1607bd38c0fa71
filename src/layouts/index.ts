import type { StoreHandle } from '../store/open.js';
import type { JobContext } from '../job.js';
import type { CheckReport } from '../check.js';
import type { PruneResult } from '../prune.js';
import { wardenLayout } from './warden.js';
import { mem0Layout } from './mem0-layout.js';

/**
 * A store layout: how each job does the right thing for one kind of store. `warden` is the memory table of the
 * brief; `mem0` is a mem0 deployment (history.db + Qdrant). Jobs ask the layout; they never branch on its name.
 */
export interface Layout {
  name: string;
  prune(store: StoreHandle, ctx: JobContext, opts: { dryRun: boolean }): Promise<PruneResult>;
  check(store: StoreHandle, ctx: JobContext): Promise<CheckReport>;
}

export const LAYOUTS: Record<StoreHandle['config']['layout'], Layout> = {
  warden: wardenLayout,
  mem0: mem0Layout,
};

export function layoutOf(store: StoreHandle): Layout {
  return LAYOUTS[store.config.layout];
}
