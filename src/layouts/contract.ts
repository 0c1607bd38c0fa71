import type { StoreConfig } from '../store/config.js';
import type { Db } from '../store/sqlite.js';
import type { PointStore } from '../vectors/contract.js';
import type { ByteCheck, PostgresStoreHandle, SideTables, SqliteStoreHandle } from '../engines/contract.js';
import type { JobContext } from '../job/job.js';
import type { Finding } from '../job/findings.js';
import type { Instant } from '../time/instants.js';
import type { Logger } from '../log/logger.js';
import type { Progress } from '../progress/progress.js';
import type { MemoryUnderReview, Verdict } from '../verifiers/types.js';
import type { Strings } from '../text/string-list.js';

/**
 * The store-layout plug point, whole: the Layout interface and every type its methods take and return. A layout
 * (src/layouts/<name>/) implements it with store primitives (src/store/) and vector stores (src/vectors/); the
 * features (jobs, digest, drift, erase, review) call it through the registry and never branch on a layout's name.
 * Adding a layout: README.md, "Adding a layout or vector store"; its test is test/layouts/contract.test.ts.
 */
export interface Layout extends LayoutJobs<StoreHandle> {
  name: string;
  /** Throws a store error naming the file and what is missing; writes nothing. */
  assertSchema(db: Db, store: StoreConfig): void;
  /**
   * Who makes the store's tables in its SQLite file: memory-warden (`init` creates or migrates them), or the SDK that
   * writes the store, named (`init` adds nothing to its files: they are the SDK's).
   */
  schemaOwner: { by: 'memory-warden' } | { by: 'sdk'; sdk: string };
  /** The Qdrant collections that belong to the store (snapshots take them all together). */
  collections(store: StoreConfig): string[];
  /**
   * SQLite files besides `db` that hold the store's vectors (mem0's TypeScript SDK keeps them in its own files):
   * snapshots copy and restore them together with `db`. Only those that exist.
   */
  vectorFiles(store: StoreConfig): string[];
  /**
   * The store's vectors are where a snapshot cannot take them (a Mastra store's PgVector tables in another schema of
   * its database without a connection of their own): the config field that puts them there and why. Snapshot and
   * restore then refuse, changing nothing, rather than take or put back the store without its vectors.
   */
  snapshotRefused?(store: StoreConfig, storeName: string): Promise<{ field: string; why: string } | undefined>;
  /**
   * Tables of a database apart from the store that hold its vectors (mem0's pgvector tables beside its history file,
   * a Mastra store's PgVector tables on another server than its PostgresStore tables): snapshots take them at one
   * instant into the folder's `pgvector/` (beside a file's copy, together with it; beside a database's tables, just
   * before them), and restore puts them back into the configured tables only (before the store's). Undefined: the
   * store has none.
   */
  vectorTables?(storeName: string, store: StoreConfig): SideTables | undefined;
  /**
   * The layout's files carry what plain SQLite cannot read (Mastra's libsql vector indexes: quick_check misreports
   * them, VACUUM cannot rebuild them): erase leaves its quick_check, VACUUM and checkpoint to the layout, whose
   * `erase` checks, scrubs (secure_delete) and truncates the WALs itself and says so in `Erased.walTruncated`.
   */
  scrubsOwnFiles?: boolean;
  /**
   * `libsql`: the store's files carry libsql vector indexes. Snapshots copy them with SQLite's backup API (VACUUM
   * INTO re-creates indexes: plain SQLite lacks libsql_vector_idx, and libsql's duplicates a row of its vector
   * metadata) and run integrity_check on copies through libsql's driver. Unset: plain SQLite throughout.
   */
  sqliteEngine?: 'libsql';
  /**
   * Where a copy of the store's SQLite file names what erase takes: the ids `erase --ids` and `erasedIn` name, and
   * the person as `erase --user` keys them (a warden row's user_id or subject, mem0's user_id, Mastra's resource
   * id). A snapshot's holds are made of these, and erase asks a local copy the same (src/snapshot/targets/holds.ts),
   * so a later erase that knows the person only by keyed hashes still finds every snapshot of theirs.
   */
  copyNames: readonly CopyNames[];
}

/** A layout's tables apart from its store (Layout.vectorTables): the engine's contract defines them. */
export type { SideTables } from '../engines/contract.js';

/**
 * One table of a copy and what in it names a memory or a person. A table or column the copy lacks is passed over:
 * every layout's entries are asked of every copy.
 */
export interface CopyNames {
  /** The table's name, or the columns a table of this kind has (Mastra's vector indexes are named per index). */
  table: string | { columns: readonly string[] };
  /** Values that are ids of what erase takes by id. */
  ids: readonly CopyValue[];
  /** The person: the first of these the table has. */
  users?: readonly CopyValue[];
  /** The person as a `user_id=<user>` part of this `&`-joined column (mem0's session_scope). */
  scopedUsers?: string;
}

/** A column, or a key of the JSON a column holds (NULL where it holds no JSON). */
export interface CopyValue {
  column: string;
  json?: string;
}

/**
 * A layout's tables on PostgreSQL (src/layouts/<name>/postgres/): the same jobs over a schema of a database that
 * every host reaches, through the engine's connections (src/engines/postgres/). Registered beside the SQLite layouts
 * in src/layouts/registry.ts, by (layout, engine).
 */
export interface PostgresLayout extends LayoutJobs<PostgresStoreHandle> {
  name: string;
  /** Throws a store error naming the setting (`stores.NAME.postgres.schema`) and what is missing; writes nothing. */
  assertSchema(store: PostgresStoreHandle): Promise<void>;
  /** Create the schema, its tables, indexes and views, or add what a store in use lacks; idempotent. */
  init(store: PostgresStoreHandle): Promise<PostgresInit>;
  /** The Qdrant collections that belong to the store. */
  collections(store: StoreConfig): string[];
}

/** What `init` did on a PostgreSQL store: each object it created, by name (empty: the schema was up to date). */
export interface PostgresInit {
  created: string[];
  /** What it could not do and why (amcheck not installable by this role), one line each. */
  notes: string[];
}

/** What every layout does on every engine it runs on: the jobs, each given the store as that engine opened it. */
export interface LayoutJobs<H> {
  prune(store: H, opts: PruneOptions): Promise<PruneResult>;
  check(store: H, opts: CheckOptions): Promise<CheckReport>;
  /**
   * Memories created in the period (a memory rewritten in place: written in it, with its `before`), flagged ones
   * first, at most maxRows shown; counts exact.
   */
  newRows(store: H, opts: NewRowsOptions): Promise<NewRows>;
  /** Live memories confirmed more than afterDays ago: how many, and the oldest `limit` of them not in `exclude`. */
  reviewDue(store: H, opts: ReviewDueOptions): Promise<{ due: number; batch: MemoryUnderReview[] }>;
  /** Apply a drift verdict to the store and record it in `opts.log` (confirm, supersede, or hand to a person). */
  applyDrift(store: H, opts: ApplyDriftOptions): Promise<Applied>;
  /**
   * A person confirms a memory: it is stamped confirmed at `now`, and `opts.decided` (the person's decision,
   * written to `opts.log`) runs in the same transaction where the layout has one. A usage error when no live
   * memory has that id. Returns what `decided` returned.
   */
  confirm(store: H, opts: ConfirmOptions): Promise<number>;
  /**
   * The memory as it reads now, shown beside evidence waiting for a person and on the review page; null when there
   * is no such row. `opts.guard` of a decision is handed the row read the same way.
   */
  currentMemory(store: H, id: string): Promise<CurrentMemory>;
  /**
   * A person corrects a memory: supersedes it with a new fact, gives it an expiry, or deletes it (with what the
   * layout deletes along with it). `opts.decided` records each memory's decision in `opts.log`, in the log's
   * transaction committed with the store's. Absent where the layout has no such correction (mem0 has no supersede
   * chain or expiry column: it is corrected through mem0, or erased). A usage error when no live memory has that id.
   */
  correct?(store: H, opts: CorrectOptions): Promise<Corrected>;
  /**
   * The corrections `correct` makes when it makes fewer than all three (Mastra's working memory has no expiry): the
   * review page offers only these, and `correct` refuses the others with a usage error saying why. Absent: all three.
   */
  corrects?: readonly CorrectionAction[];
  /** Remove every memory the selector names from every part of the store (see src/erase/erase.ts). */
  erase(store: H, opts: LayoutEraseOptions): Promise<Erased>;
  /**
   * What of this store earlier erases took (a restored copy holds what its snapshot held): every id of a memory (and
   * of whatever else the layout's erase takes by id: a thread, a message, a resource) and every person the store
   * names that `ledger` says an erase took, as the selectors `erase` takes to take them out again. Reads only; asks
   * `ledger` about each id and person the store holds (SQLite file and vector side). Every restore calls it on the
   * restored files before they replace the store (src/erase/restore-ledger.ts), then `erase`s what it returned.
   */
  erasedIn(store: H, ledger: ErasedLedger): Promise<EraseSelector[]>;
  /**
   * `repair dangling`: delete the rows superseded by a row that no longer exists, with every older version whose chain
   * leads to one of them (the cascade that should have happened), their vectors first, under the store's maintenance
   * lock, in short transactions beside agents writing. Never reset to NULL: that would put the corrected fact back
   * into live_memory. Absent where the layout has no supersede chains.
   */
  repairDangling?(store: H): Promise<DanglingRepair>;
  /**
   * `repair timestamps`: rewrite parseable non-canonical times to the layout's canonical form; leave for a person those
   * that hold no instant it can write. Absent where the layout keeps no times of its own.
   */
  repairTimestamps?(store: H): Promise<TimestampRepair>;
  /**
   * `repair orphans`: delete the vector points whose row no longer exists, each page's rows looked up a second time
   * right before the delete (a row an agent wrote meanwhile keeps its point); with `dryRun`, count them. Absent where
   * the layout compares its two stores its own way.
   */
  repairOrphans?(store: H, opts: OrphanRepairOptions): Promise<OrphanRepair>;
}

// ---- repair

export interface DanglingRepair {
  store: string;
  deleted: number;
  /** Rows that pointed at nothing: the corrected versions whose correction was deleted with foreign keys off. */
  dangling: string[];
  /** Older versions behind them, deleted by the cascade that should have happened at the time. */
  cascaded: string[];
  /**
   * What the store's schema says of the supersede chains' foreign key, where it can be without one (a database table
   * an agent made itself): `enforced`, `absent`, `not-valid`, `disabled` (its triggers switched off). Absent on SQLite,
   * whose foreign keys are the connection's (every connection memory-warden opens turns them on).
   */
  foreignKey?: 'enforced' | 'absent' | 'not-valid' | 'disabled';
}

export interface TimestampChange {
  id: string;
  column: string;
  from: string;
  to: string;
}

/** A time left for a person: the row, the column, and the value as stored (an instant: in UTC), never rewritten. */
export interface TimestampLeft {
  id: string;
  column: string;
  value: string;
}

export interface TimestampRepair {
  store: string;
  rewritten: number;
  unparseable: number;
  /** Parseable, but outside the years 0000-9999 once in UTC (`9999-12-31T23:59:59-12:00`): no canonical text holds it. */
  outOfRange: number;
  changes: TimestampChange[];
  /** The times left for a person, at most ID_SAMPLE of them, where the layout lists them. */
  left?: TimestampLeft[];
  /** What the store's column types decide (a time column of an instant type holds nothing unparseable), one line each. */
  notes?: string[];
}

export interface OrphanRepairOptions {
  dryRun?: boolean;
  pageSize?: number;
  signal?: AbortSignal;
}

export interface OrphanRepair {
  store: string;
  dryRun: boolean;
  deleted: number;
  /** `collection:pointId`, capped at ID_SAMPLE. */
  ids: string[];
  collections: { collection: string; deleted: number }[];
}

/**
 * The erase ledger (src/erase/needles.ts), as questions: whether an erase of this store took this id, or this person
 * (a user id, a resource id, the subject a per-user store names its person by). Keyed hashes behind it, never
 * the ids: a layout asks about what it holds.
 */
export interface ErasedLedger {
  id(id: string): boolean;
  user(user: string): boolean;
}

/** What the ledger names of a store's ids and people, as erase selectors (`{ ids }` first, then one per person). */
export function ledgerSelectors(ids: Iterable<string>, users: Iterable<string>, ledger: ErasedLedger): EraseSelector[] {
  const erasedIds = [...new Set([...ids].filter((id) => ledger.id(id)))];
  const people = [...new Set([...users].filter((u) => u !== '' && ledger.user(u)))];
  return [...(erasedIds.length > 0 ? [{ ids: erasedIds }] : []), ...people.map((user) => ({ user }))];
}

/**
 * One configured SQLite store, opened (src/layouts/open.ts): its connection and, when configured, its vector side.
 * The engine's handle (src/engines/contract.ts); a PostgreSQL store's is PostgresStoreHandle.
 */
export type StoreHandle = SqliteStoreHandle;
export type { AnyStoreHandle, PostgresStoreHandle } from '../engines/contract.js';

// ---- prune

export interface PruneOptions {
  dryRun: boolean;
  ctx: JobContext;
  /**
   * Told each batch (memory id, its user where the layout knows one) before it is deleted: erase's ledger
   * (src/erase/ledger.ts), so `erase --user` still finds what prune took. Layouts without users ignore it.
   */
  beforeDelete?: (memories: { id: string; user: string | null }[], at: Instant) => void;
}

export interface PruneResult {
  store: string;
  now: string;
  dryRun: boolean;
  deleted: number;
  expired: number;
  superseded: number;
  cascaded: number;
  batches: number;
  /** The deleted (or, dry run, doomed) ids, at most ID_CAP of them. */
  ids: string[];
  idsTruncated: boolean;
  durationMs: number;
  /**
   * What the SDK's own deletes left behind and this prune removed (dry run: would remove), by the check code that
   * names it: Mastra's embeddings whose message is gone, mem0's entity links to memories that are gone (and
   * `mem0_entity_left_without_links`, the entities deleted as their last such link went). Not in `deleted`: no
   * memory goes with them.
   */
  leftovers?: Record<string, number>;
  /**
   * What went, by kind, where a layout's rows are not one kind of memory (Mastra: `threads`, `messages` past their
   * retention, and with the threads their `threadMessages`, `embeddings` and `observations`); the text output says
   * these instead of expired and superseded rows.
   */
  counts?: Record<string, number>;
}

// ---- check

export interface CheckOptions {
  ctx: JobContext;
}

export interface CheckReport {
  ok: boolean;
  store: string;
  path: string;
  /** The checked file's identity (src/store/file-identity.ts), set by the integrity job: what the digest matches. */
  file?: string;
  checkedAt: string;
  rows: number;
  live: number;
  /** rows − live: what prune and review have yet to deal with. */
  gap: number;
  integrity: string;
  /** The SQLite file's journal mode; `postgres` on a PostgreSQL store, which has none of its own. */
  journalMode: string;
  dangling: number;
  reviewDue: number;
  /** Findings that make the check fail (exit 1). */
  problems: Finding[];
  /** Findings worth knowing that are not problems (review due, prune pending). */
  notes: Finding[];
}

// ---- the digest's new rows

export interface Period {
  start: Instant;
  end: Instant;
}

/** Why a person should look twice at a memory (the digest's rules); no reason: not flagged. */
export type LookTwice = (row: { subject: unknown; fact: unknown; source: unknown }) => string[];

export interface NewRowsOptions {
  period: Period;
  maxRows: number;
  lookTwice: LookTwice;
  /**
   * The digest's record of the texts memories held (src/digest/texts.ts), for a layout that rewrites a memory in
   * place and keeps only its latest text: what lets it give a row its `before`. Absent: no record (the row's
   * before is then unknown).
   */
  texts?: MemoryTexts;
}

/**
 * What the digest remembers of memories rewritten in place, by the memory's id in this store. The layout tells it
 * every such memory written in the period (`seen`, all of them, not only the rows shown) and every earlier one it
 * does not hold yet, and asks what one held before (`before`); it never sees where the record is kept.
 */
export interface MemoryTexts {
  /** The memories' texts as read now, each with the time the store says it was written. */
  seen(memories: readonly { id: string; subject: string; text: string; writtenAt: Instant }[]): void;
  /** The latest text recorded for the memory that was written before `at`; null when there is none. */
  before(id: string, at: Instant): { text: string; writtenAt: Instant } | null;
}

/**
 * What a memory rewritten in place said at the period's start: `text` as memory-warden last recorded it,
 * `none` when the memory did not exist yet (created in the period), `unknown` when there is no record of it
 * (the first digest after it was written, or the record was dropped): never shown as empty.
 */
export type Before = { kind: 'text'; text: string; writtenAt: string } | { kind: 'none' } | { kind: 'unknown' };

export interface MemoryRow {
  id: string;
  subject: string;
  fact: string;
  source: string;
  createdAt: string;
  expiresAt: string | null;
}

export interface FlaggedRow extends MemoryRow {
  /** Why a person should look twice, e.g. `source: fetched page`, `fact: ignore previous`. */
  reasons: string[];
  /**
   * Set on a memory rewritten in place (its `fact` is the text after): what it said before. Absent on a row that is
   * a new memory of its own (every row of a layout that writes new rows).
   */
  before?: Before;
}

export interface NewRows {
  /** Exact number of rows created in the period. */
  total: number;
  /** Exact number of those that are flagged. */
  flagged: number;
  /** Flagged rows first (newest first), then the rest (newest first); at most maxRows in all. */
  shown: FlaggedRow[];
  /** total − shown.length, exact. */
  more: number;
}

// ---- the review queue and drift

export interface ReviewDueOptions {
  now: Instant;
  afterDays: number;
  /** At most this many rows (config review.batch); undefined: all due rows. */
  limit?: number;
  /** Rows already waiting for a person: they are in the human queue, not picked again. */
  exclude?: readonly string[];
  /**
   * Every confirmed_at is canonical text (check's one pass has just counted no other): due and oldest-first are
   * then plain text comparisons, with no per-row test of the form.
   */
  canonicalOnly?: boolean;
}

/**
 * The row as it is now beside evidence waiting for a person; null when it no longer exists. `expires_at` is the
 * layout's expiry as stored (mem0: `expiration_date`), `superseded_by` null where the layout has no chains.
 */
export type CurrentMemory =
  | (MemoryUnderReview & {
      superseded_by: string | null;
      expires_at: string | null;
      /**
       * The older versions whose supersede chain leads to this row, by id: what deleting it takes along (ON DELETE
       * CASCADE), so part of what a person's decision on it depends on. Absent where the layout has no chains.
       */
      olderVersions?: OlderVersion[];
    })
  | null;

/** One row of a chain that leads to a memory under review, as it reads now. */
export interface OlderVersion {
  id: string;
  subject: string;
  fact: string;
  source: string;
  confirmed_at: string;
  expires_at: string | null;
  superseded_by: string | null;
}

/**
 * Called with the row as `currentMemory` reads it, just before a person's decision changes it: inside the write
 * transaction where the layout has one, so nothing can change the row between the call and the write. Throwing
 * refuses the decision with nothing written (the review page refuses a form drawn before the row changed).
 */
export type DecisionGuard = (row: CurrentMemory) => void;

/** What one memory's verification came to, before anything is written (src/drift/dispatch.ts decides it). */
export interface Decision {
  memory: MemoryUnderReview;
  verdict: Verdict;
  verifier: string | null;
  rule: string | null;
  evidence: Record<string, unknown>;
  fingerprint: string | null;
  needsPerson: boolean;
  /** contradicted, with a replacement and autoSupersede: the row to insert in place of this one. */
  supersede?: { fact: string; source: string };
}

export type RecordedVerdict = 'confirmed' | 'contradicted' | 'changed' | 'unverifiable' | 'refused' | 'manual';

export interface VerdictRecord {
  store: string;
  memoryId: string;
  verdict: RecordedVerdict;
  verifier?: string | null;
  evidence?: unknown;
  fingerprint?: string | null;
  checkedAt: Instant;
  needsPerson?: boolean;
  resolvedAt?: Instant | null;
  resolution?: string | null;
}

/**
 * Where verdicts are recorded (the state db's drift_verdicts, src/drift/record.ts). The one way a layout records:
 * it is handed a log, it never opens or writes the state db itself.
 */
export interface VerdictLog {
  /** Write one verdict; returns its id. */
  record(v: VerdictRecord): number;
  /**
   * Run `fn` in one transaction of the log and one of `storeDb` (the log's opened first and committed last, so a
   * failed store write records nothing); with `storeDb` null, in the log's transaction alone.
   */
  together<T>(storeDb: Db | null, fn: () => T): T;
  /**
   * For a write spread over several store transactions (a deep chain's delete): open the log's transaction inside
   * the store's, before it commits; `commit` right after the store's commit; `rollback` undoes an open one (no-op
   * when none is open).
   */
  begin(): void;
  commit(): void;
  rollback(): void;
}

export interface ApplyDriftOptions {
  decision: Decision;
  now: Instant;
  log: VerdictLog;
}

export interface ConfirmOptions {
  id: string;
  now: Instant;
  log: VerdictLog;
  /** The person's decision: writes it to `log` and resolves what waited; run inside `log.together`. */
  decided: () => number;
  /** Looks at the row inside the same transaction, before the stamp (mem0: just before its update). */
  guard?: DecisionGuard;
}

export type Correction =
  | { action: 'supersede'; fact: string; source: string }
  | { action: 'expire'; expiresAt: string }
  | { action: 'delete' };

export type CorrectionAction = Correction['action'];

/** Every correction, for a layout whose `correct` leaves out none. */
export const ALL_CORRECTIONS: readonly CorrectionAction[] = ['supersede', 'expire', 'delete'];

export interface CorrectOptions {
  id: string;
  now: Instant;
  correction: Correction;
  log: VerdictLog;
  /**
   * The person's decision on one memory (`opts.id`, or one deleted along with it; `detail` is what the layout did):
   * writes it to `log` and resolves what waited for it; returns how many waited. Called inside the log's transaction.
   */
  decided: (memoryId: string, resolution: string, detail: Record<string, unknown>) => number;
  /**
   * Supersede and expire: looks at the row inside their transaction. A delete: looks before the vectors go, and
   * the DELETE itself then takes the row only if it still reads as the guard saw it.
   */
  guard?: DecisionGuard;
}

export interface Corrected {
  /**
   * drift_verdicts.resolution of the corrected memory: superseded:<new id>, expires:<time>, deleted; `replaced` where
   * the layout keeps one text per memory and no versions (Mastra's working memory): the same id, the new text, no newId.
   */
  resolution: string;
  /** Items that were waiting for a person and are now resolved (every memory the correction touched). */
  resolved: number;
  newId?: string;
  expiresAt?: string;
  /** Every memory a delete removed, the corrected one first. */
  deleted?: string[];
}

export interface Applied {
  id: string;
  verdict: Decision['verdict'];
  verifier: string | null;
  needsPerson: boolean;
  /** The new row when the old one was superseded. */
  supersededBy?: string;
  /** The row changed while it was being verified: recorded, nothing written. */
  skipped?: string;
  /** Why, in one line: the evidence's reason; always there for an unverifiable or refused verdict. */
  reason?: string;
}

/**
 * A decision as every layout's applyDrift reports it before anything is written: the verdict, and its reason in one
 * line (a verifier plugin's may run over several). An unverifiable or refused verdict always says why.
 */
export function appliedOf(d: Decision): Applied {
  const out: Applied = { id: d.memory.id, verdict: d.verdict, verifier: d.verifier, needsPerson: d.needsPerson };
  const given = typeof d.evidence.reason === 'string' ? d.evidence.reason.split(/\r?\n/).map((l) => l.trim()).find((l) => l !== '') : undefined;
  const reason = given ?? (d.verdict === 'unverifiable' || d.verdict === 'refused' ? `${d.verifier ?? 'the verifier'} gave no reason` : undefined);
  if (reason !== undefined) out.reason = reason;
  return out;
}

// ---- erase

export type EraseSelector = { user: string } | { subject: string } | { ids: string[] };

export interface EraseOptions {
  dryRun?: boolean;
  /** Delete the snapshot folders that still contain erased text. */
  snapshots?: boolean;
  now: () => Instant;
  log?: Logger;
  /** Defaults to the store's configured Qdrant. */
  points?: PointStore;
  /**
   * mem0: go on although the memory collection is missing or holds no mem0 point while history says memories
   * exist (the vectors are known to be lost). Without it such an erase refuses: it would find nothing to delete.
   */
  vectorsLost?: boolean;
  /** Record the receipt in the state db (default true; never for a dry run). */
  record?: boolean;
  /** How far the deletes have got, on a terminal (src/progress/progress.ts). */
  progress?: Progress;
  /** Set by erase for --user: memories memory-warden itself deleted for this person (src/erase/ledger.ts). */
  deletedIds?: readonly string[];
}

export interface LayoutEraseOptions extends EraseOptions {
  selector: EraseSelector;
  dryRun: boolean;
  /**
   * Called after each of the deletes' transactions commits (erase asks its worker for a WAL checkpoint there,
   * src/erase/erase.ts). A layout that deletes in one transaction, or not through the store's connection, may ignore it.
   */
  afterCommit?: () => void;
  /**
   * The dry run this erase made of the same selector just before (the plan it recorded): a layout may take from it
   * answers that still hold instead of reading the store for them again.
   */
  planned?: Erased;
  /**
   * This dry run is the plan of the erase that follows it (its records are written from it before anything is
   * deleted): what only a person reading a dry run needs, and the real run counts itself (stray points, entity work:
   * reads of other collections, another server that may be down), is not counted.
   */
  plan?: boolean;
}

/**
 * The other fields of erased memories. Which of them no other row has is asked only once a record of memory-warden's
 * is found to quote one of them (most erases find none): answering reads the store, a scan of it without an index.
 */
export interface ErasedFields {
  /** Every distinct subject and source of the erased rows (empty ones left out). */
  values: readonly string[];
  /** Those of `values` that no row left in the store has (computed once, on the first call). */
  onlyTheirs(): ReadonlySet<string>;
}

/**
 * What one layout's erase found and did; the texts are kept in memory only, to look for copies in snapshots. The ids
 * and texts are read only as `Strings` (src/text/string-list.ts): a layout that takes many memories holds them as bytes
 * (a StringList), one that takes few may hand arrays.
 */
/** What an erase knows it could not reach, with how the operator reaches it (the receipt's `unreached`). */
export interface Unreached {
  what: string;
  facts?: Record<string, string | number>;
  reach: string;
}

export interface Erased {
  /** What this erase knows it could not reach (the receipt lists each; absent: nothing known). */
  unreached?: Unreached[];
  ids: Strings;
  counts: Record<string, number>;
  texts: Strings;
  /**
   * The erased memories' other fields (subject, source) and which of them name only them (no remaining row has
   * it): memory-warden's records quoting one of those are scrubbed as the texts are. Never used to find rows, points
   * or snapshots.
   */
  fields?: ErasedFields;
  /** Layouts that scrub their own files (`scrubsOwnFiles`): whether every WAL was emptied and truncated. */
  walTruncated?: boolean;
  /** A SQLite store whose vectors are in PostgreSQL tables (mem0's pgvector): what reading those tables' files back found. */
  bytes?: ByteCheck;
  /**
   * On a database engine (PostgreSQL): the tables the erase deletes from, whether or not this run deleted anything
   * (an earlier run killed before its VACUUM left the rows' bytes there). The engine vacuums them and reads them back
   * (src/engines/contract.ts, `scrubErased`).
   */
  tables?: string[];
}
