import type { Logger } from '../log/logger.js';
import type { Instant } from '../time/instants.js';

/**
 * The plug point of drift re-verification. A verifier reads the thing a memory describes (a file, a repo, a
 * monitoring endpoint) and says what it says now. Judging is shared: a verifier returns what it observed and the
 * rule's `expect` (or, without one, the fingerprint of the last confirmed reading) decides the verdict.
 */

/** The row under review, as the agent wrote it. Every field is hostile text. */
export interface MemoryUnderReview {
  id: string;
  subject: string;
  fact: string;
  source: string;
  confirmed_at: string;
}

/** What a verifier is asked to check: one memory and the rule's `with`, templates already filled in. */
export interface VerifyTask<P = Record<string, unknown>> {
  memory: MemoryUnderReview;
  params: P;
  /** Named groups captured from the memory's source and subject by the rule's `match`. */
  captures: Readonly<Record<string, string>>;
}

/** The allowlists from config `verify.allow`: nothing outside them is ever read. */
export interface Allowlists {
  /** Real paths of the folders files may be read from. */
  fileRoots: readonly string[];
  /** Repositories (local paths or URLs) the git verifier may clone. */
  gitRepos: readonly string[];
  /** `host` (any port) or `host:port` entries the http verifier may GET. */
  httpHosts: readonly string[];
}

export interface VerifierContext {
  /** Aborted when the verifier's time is up or the job is stopped: pass it to every read. */
  signal: AbortSignal;
  log: Logger;
  now: Instant;
  allow: Allowlists;
  /** A folder the verifier may keep caches in (clones), shared across runs. */
  cacheDir: string;
  /**
   * Read a source at most once per run: every memory of this run asking for `key` shares the first read.
   * Use it for whatever is expensive or rate-limited (a file, a URL, a fetch of a repository).
   */
  once<T>(key: string, read: () => Promise<T>): Promise<T>;
  /**
   * A path from a rule, checked against `allow.fileRoots` (no `..`, symlinks resolved): its real path, or a refusal.
   * Only a check: what is then opened by that path may have been swapped since. To read a file, use readFile.
   */
  resolveFile(path: string): Promise<string>;
  /**
   * A file under `allow.fileRoots`, read through the descriptor that was checked (so a symlink swapped in while it
   * is opened is refused, not followed): its real path and text, or a refusal. A directory, a FIFO, a device or a
   * file above `maxBytes` (default 10 MiB) is an error (unverifiable).
   */
  readFile(path: string, opts?: { maxBytes?: number }): Promise<{ path: string; text: string }>;
}

/** What the source says now. Without `verdict`, the rule's `expect` or the fingerprint decides. */
export interface Observation {
  /** The value read (after `select`): compared by `expect`, shown to a person, offered to `replacement` as `${value}`. */
  value: unknown;
  /** Same content, same fingerprint. Default: a hash of `value`. */
  fingerprint?: string;
  /** What a person needs to see where it came from: file, commit, URL, status. */
  evidence?: Record<string, unknown>;
  /** A verifier that can judge on its own says so; the rule's `expect` is then not used. */
  verdict?: 'confirmed' | 'contradicted';
}

/** A verifier that could not or would not read gives a reason; nothing in the store changes. */
export interface NoReading {
  verdict: 'unverifiable' | 'refused';
  reason: string;
  evidence?: Record<string, unknown>;
}

export type VerifierResult = Observation | NoReading;

/** Anything with zod's `safeParse` (a zod schema, usually) validates a rule's `with` for a verifier. */
export interface ParamsSchema<P> {
  safeParse(value: unknown): { success: true; data: P } | { success: false; error: { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> } };
}

export interface Verifier<P = Record<string, unknown>> {
  /** How rules name it (`use: NAME`): lower case letters, digits and `-`. */
  name: string;
  description?: string;
  /** Validates the rule's `with` (template fields are strings). Without it, `with` is passed as written. */
  params?: ParamsSchema<P>;
  verify(task: VerifyTask<P>, ctx: VerifierContext): Promise<VerifierResult>;
}

/** The verdicts a run records (drift_verdicts.verdict, besides `manual` for a person's decision). */
export type Verdict = 'confirmed' | 'contradicted' | 'changed' | 'unverifiable' | 'refused';

const REFUSAL: unique symbol = Symbol.for('memory-warden.refusal');

/**
 * Thrown by the context helpers (resolveFile, the http and git guards) when a source asks for something the
 * config does not allow; recorded as verdict `refused` with the reason. Never followed, never retried.
 *
 * A plugin's `refuse()` comes from the package entry (dist/src/index.js), which is another copy of this class than
 * the one the drift job checks against whenever the CLI runs its bundle (src/launch.ts) or a second install is
 * loaded: `instanceof Refusal` goes by a brand every copy shares, as defineVerifier's does, not by the class object.
 */
export class Refusal extends Error {
  readonly [REFUSAL] = true;
  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as { [REFUSAL]?: unknown })[REFUSAL] === true;
  }
  constructor(readonly reason: string) {
    super(reason);
    this.name = 'Refusal';
  }
}

export const refuse = (reason: string): Refusal => new Refusal(reason);

export function isNoReading(r: VerifierResult): r is NoReading {
  return (r as NoReading).verdict === 'unverifiable' || (r as NoReading).verdict === 'refused';
}
