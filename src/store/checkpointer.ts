import { startStoreThread } from './thread.js';

/**
 * WAL checkpoints on a thread of their own, with their own connection (src/store/thread.ts): the pages a prune
 * batch wrote are copied into the database file (and fsynced) on the second core while the next batch runs,
 * instead of between the two. WAL mode lets a checkpoint run beside a writer by design, so this changes when the
 * copy happens, never what ends up in the file. A passive checkpoint never waits for a lock and never blocks a
 * writer.
 */

export interface Checkpointer {
  /** Ask for a checkpoint; asks that arrive while one runs fold into one more run after it. */
  request(): void;
  /** Resolves once no checkpoint runs or waits; rejects with the first checkpoint's error. */
  idle(): Promise<void>;
  close(): Promise<void>;
}

export function startCheckpointer(path: string): Checkpointer {
  const thread = startStoreThread(path);
  let running = false;
  let again = false;
  let failure: Error | null = null;
  let waiting: Array<() => void> = [];
  const settle = () => {
    if (running) return;
    const wake = waiting;
    waiting = [];
    wake.forEach((f) => f());
  };
  const run = () => {
    running = true;
    void thread.call('checkpoint').then((r) => {
      if (r === null || r.error !== undefined) failure ??= new Error(`checkpoint ${path}: ${r?.error ?? 'the checkpoint thread stopped'}`);
      running = false;
      if (again && !failure) {
        again = false;
        run();
      }
      settle();
    });
  };
  return {
    request() {
      if (failure) return;
      if (running) again = true;
      else run();
    },
    async idle() {
      if (running) await new Promise<void>((resolve) => waiting.push(resolve));
      if (failure) throw failure;
    },
    async close() {
      await this.idle().catch(() => undefined);
      await thread.close();
    },
  };
}
