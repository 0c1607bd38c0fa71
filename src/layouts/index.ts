import type { StoreHandle } from '../store/open.js';
import type { StoreConfig } from '../store/config.js';
import type { Db } from '../store/sqlite.js';
import type { JobContext } from '../job.js';
import type { CheckReport } from '../check.js';
import type { PruneResult } from '../prune.js';
import type { Instant } from '../time.js';
import type { NewRows } from '../digest/model.js';
import type { MemoryUnderReview } from '../verifiers/types.js';
import type { QueueOptions } from '../drift/queue.js';
import type { Decision } from '../drift/dispatch.js';
import type { Applied } from '../drift/apply.js';
import type { LookTwiceRules } from '../digest/flags.js';
import type { Period } from '../digest/collect.js';
import type { Erased, EraseOptions, EraseSelector } from '../erase.js';
import type { PendingItem } from '../drift/review.js';
import { wardenLayout } from './warden.js';
import { mem0Layout } from './mem0-layout.js';

/**
 * A store layout: how each job does the right thing for one kind of store. `warden` is the memory table of the
 * brief; `mem0` is a mem0 deployment (history.db + Qdrant, docs/mem0-layout.md). Jobs ask the layout; they never
 * branch on its name.
 */
export interface Layout {
  name: string;
  /** Throws a store error naming the file and what is missing; writes nothing. */
  assertSchema(db: Db, store: StoreConfig): void;
  /** The Qdrant collections that belong to the store (snapshots take them all together). */
  collections(store: StoreConfig): string[];
  /**
   * SQLite files besides `db` that hold the store's vectors (mem0's TypeScript SDK keeps them in its own files):
   * snapshots copy and restore them together with `db`. Only those that exist.
   */
  vectorFiles(store: StoreConfig): string[];
  prune(store: StoreHandle, ctx: JobContext, opts: { dryRun: boolean }): Promise<PruneResult>;
  check(store: StoreHandle, ctx: JobContext): Promise<CheckReport>;
  /** Memories created in the period, flagged ones first, at most maxRows shown; counts exact. */
  newRows(store: StoreHandle, period: Period, maxRows: number, rules: LookTwiceRules): Promise<NewRows>;
  /** Live memories confirmed more than afterDays ago: how many, and the oldest `limit` of them not in `exclude`. */
  reviewDue(store: StoreHandle, opts: QueueOptions): Promise<{ due: number; batch: MemoryUnderReview[] }>;
  /** Apply a drift verdict to the store and record it (confirm, supersede, or hand to a person). */
  applyDrift(store: StoreHandle, state: Db, decision: Decision, now: Instant): Promise<Applied>;
  /**
   * A person confirms a memory: it is stamped confirmed at `now`, and `record` (the decision in the state db)
   * runs in the same transaction where the layout has one. A usage error when no live memory has that id.
   */
  confirm(store: StoreHandle, state: Db, id: string, now: Instant, record: () => number): Promise<number>;
  /** The memory as it reads now, shown beside evidence waiting for a person; null when there is no such row. */
  currentMemory(store: StoreHandle, id: string): PendingItem['memory'];
  /** Whether a person can supersede or expire a memory here (mem0 has no supersede chain or expiry column). */
  corrections: boolean;
  /** Remove every memory the selector names from every part of the store (see src/erase.ts). */
  erase(store: StoreHandle, sel: EraseSelector, dryRun: boolean, opts: EraseOptions): Promise<Erased>;
}

export const LAYOUTS: Record<StoreConfig['layout'], Layout> = {
  warden: wardenLayout,
  mem0: mem0Layout,
};

export function layoutFor(store: StoreConfig): Layout {
  return LAYOUTS[store.layout];
}

export function layoutOf(store: StoreHandle): Layout {
  return layoutFor(store.config);
}
