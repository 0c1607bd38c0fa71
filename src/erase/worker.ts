import { startStoreThread } from '../store/thread.js';

/**
 * Erase's second core (src/store/thread.ts): quick_check runs while the main thread finds what to erase (a read
 * beside a read), and VACUUM with its checkpoint(TRUNCATE) runs while the main thread scrubs the state db and
 * searches the snapshots (after the deletes committed; the main connection stays idle meanwhile). Between the
 * deletes' transactions it runs the PASSIVE checkpoints erase asks for, so another writer's commits do not.
 * Each call answers null when the thread could not do it: the caller then does it on the store's own connection,
 * as before, and an error there names the file.
 */

export interface Compacted {
  vacuumed: boolean;
  /** False when a reader kept the WAL from being truncated. */
  walTruncated: boolean;
}

export interface StoreWorker {
  /** quick_check(5)'s lines ("ok" alone when intact); null: the thread could not run it. */
  quickCheck(): Promise<string[] | null>;
  /** A PASSIVE checkpoint, queued behind whatever runs (the worker takes its calls in order); not waited for. */
  checkpoint(): void;
  /** VACUUM, then wal_checkpoint(TRUNCATE); null: the thread could not (the caller does it on its connection). */
  compact(): Promise<Compacted | null>;
  close(): Promise<void>;
}

export function startStoreWorker(path: string, busyMs: number): StoreWorker {
  // SQLite's default page cache (2 MB) instead of better-sqlite3's 16 MB: VACUUM streams every page once, and the
  // larger cache only added 28 MB to peak RSS (1M rows), no speed.
  const thread = startStoreThread(path, { busyMs, cacheKb: 2000 });
  return {
    async quickCheck() {
      const r = await thread.call('quick_check');
      return r && Array.isArray(r.result) ? (r.result as string[]) : null;
    },
    checkpoint() {
      void thread.call('checkpoint');
    },
    async compact() {
      const r = await thread.call('compact');
      return r && r.result && typeof r.result === 'object' ? (r.result as Compacted) : null;
    },
    close: () => thread.close(),
  };
}

/** For a layout that checks and scrubs its own files (Layout.scrubsOwnFiles): no thread, nothing to do. */
export function idleWorker(): StoreWorker {
  return { quickCheck: async () => null, checkpoint() {}, compact: async () => null, close: async () => {} };
}
