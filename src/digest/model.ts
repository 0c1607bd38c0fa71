import type { StoreSelector } from '../layouts/open.js';
import type { Finding } from '../job/findings.js';

/**
 * What one digest says, as data: collected from the stores and the state db (collect.ts), rendered to text
 * and HTML (render.ts) by pure functions. Strings from a store are carried raw here (credentials masked by collect); only render escapes them.
 */
export interface DigestModel {
  /** Canonical UTC text of the period [start, end): rows created at or after start and before end. */
  period: { start: string; end: string };
  generatedAt: string;
  /** `all stores` or the store of a per-store digest. */
  scope: string;
  stores: StoreSection[];
  /** Failed runs of jobs that belong to no store (the digest itself, the scheduler). */
  failedGlobalJobs: FailedJob[];
  /** Nothing new in any store, no failed job, no integrity problem. */
  quiet: boolean;
}



// A store's new rows are the layout contract's vocabulary (src/layouts/contract.ts).
export type { Before, FlaggedRow, MemoryRow, NewRows } from '../layouts/contract.js';
import type { NewRows } from '../layouts/contract.js';

export interface ReviewRow {
  id: string;
  subject: string;
  fact: string;
  source: string;
  confirmedAt: string;
  /** Its place on the review page (signed link), when review.url is configured. */
  link?: string;
}

export interface FailedJob {
  job: string;
  store: string | null;
  finishedAt: string;
  error: string;
}

export interface PruneSummary {
  runs: number;
  deleted: number;
  expired: number;
  superseded: number;
  cascaded: number;
  /** What went by kind, summed over the runs, where the layout counts so (Mastra's threads and messages). */
  counts?: Record<string, number>;
}

export interface SnapshotSummary {
  /** The folder or path the snapshot job reported, when it did. */
  where: string | null;
  takenAt: string;
  ageHours: number;
}

export interface AwaitingVerdict {
  memoryId: string;
  verdict: string;
  verifier: string | null;
  evidence: string | null;
  checkedAt: string;
  /** Its place on the review page (signed link), when review.url is configured. */
  link?: string;
}

export interface Maintenance {
  rows: number;
  live: number;
  problems: Finding[];
  notes: Finding[];
  pruned: PruneSummary;
  lastSnapshot: SnapshotSummary | null;
  awaitingPerson: { total: number; shown: AwaitingVerdict[] };
  failedJobs: FailedJob[];
}

export interface StoreSection {
  name: string;
  /** How the review commands name the store (src/store/open.ts storeSelector). */
  select: StoreSelector;
  /** The store could not be read: the digest still goes out, saying so. */
  error?: string;
  /**
   * No report of this store at all (its host was silent): its rows, counts, integrity and jobs are unknown, not
   * zero; its period stays open and the next digest covers it.
   */
  unknown?: boolean;
  /** Where this store's section starts when earlier than the digest's period: an earlier digest had no report of it. */
  since?: string;
  newRows: NewRows;
  /** `supersede`: whether the store's layout can supersede (mem0 cannot): the digest suggests only what works. */
  review: { due: number; afterDays: number; batch: ReviewRow[]; supersede?: boolean };
  maintenance: Maintenance;
}
