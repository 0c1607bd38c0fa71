import { startStoreThread } from './thread.js';

/**
 * WAL checkpoints on a thread of their own, with their own connection (src/store/thread.ts): the pages a prune
 * batch wrote are copied into the database file (and fsynced) on the second core while the next batch runs,
 * instead of between the two. WAL mode lets a checkpoint run beside a writer by design, so this changes when the
 * copy happens, never what ends up in the file. A passive checkpoint never waits for a lock and never blocks a
 * writer.
 *
 * Requests reach the thread through shared memory, not messages: the thread starts the checkpoint of a batch
 * within microseconds of its commit (and the next one the moment the last ends), whatever the main thread is doing.
 * That matters to the agent. Its own commits checkpoint whenever the WAL holds 1,000 frames or more (SQLite's
 * default wal_autocheckpoint) and no other connection is checkpointing: one that got in between the prune's
 * commit and the start of this thread's checkpoint copied the prune's whole batch and waited for both fsyncs.
 */

export interface Checkpointer {
  /** Ask for a checkpoint; asks that arrive while one runs fold into one more run after it. */
  request(): void;
  /**
   * Asks for a checkpoint and returns once the thread is checkpointing (at most `maxMs` later): whoever holds the
   * write lock meanwhile knows that no other connection's commit can find the frames not being copied.
   */
  requestStarted(maxMs: number): void;
  /** Resolves once the thread waits for requests (or could not start: then idle() rejects). */
  ready(): Promise<void>;
  /** Resolves once every checkpoint asked for has run; rejects with the thread's error. */
  idle(): Promise<void>;
  close(): Promise<void>;
}

/**
 * The shared counters: checkpoints asked for, stop, checkpoints done (the asked count the last one answered), one the
 * thread sleeps on, whether the thread is ready (its connection open, waiting for requests), and whether it is
 * checkpointing now.
 */
const ASKED = 0;
const STOP = 1;
const DONE = 2;
const READY = 4;
const RUNNING = 5;

export function startCheckpointer(path: string): Checkpointer {
  const thread = startStoreThread(path);
  const shared = new Int32Array(new SharedArrayBuffer(6 * 4));
  let failure: Error | null = null;
  const loop = thread.call('checkpoints', { signal: shared.buffer }).then((r) => {
    if (r === null || r.error !== undefined) failure ??= new Error(`checkpoint ${path}: ${r?.error ?? 'the checkpoint thread stopped'}`);
    Atomics.store(shared, STOP, 1);
  });
  const stopped = () => failure !== null || Atomics.load(shared, STOP) !== 0;
  return {
    request() {
      if (stopped()) return;
      Atomics.add(shared, ASKED, 1);
      Atomics.notify(shared, ASKED);
    },
    requestStarted(maxMs) {
      this.request();
      const asked = Atomics.load(shared, ASKED);
      const until = performance.now() + maxMs;
      // Running already: it goes on to this request's frames the moment it ends (src/store/thread.ts).
      while (Atomics.load(shared, RUNNING) === 0 && Atomics.load(shared, DONE) < asked && !stopped()) {
        const left = until - performance.now();
        if (left <= 0) return;
        Atomics.wait(shared, RUNNING, 0, left);
      }
    },
    async ready() {
      while (Atomics.load(shared, READY) === 0 && !stopped()) {
        const wait = Atomics.waitAsync(shared, READY, 0, 100);
        if (wait.async) await Promise.race([wait.value, loop]);
      }
    },
    async idle() {
      const asked = Atomics.load(shared, ASKED);
      for (let done = Atomics.load(shared, DONE); done !== asked && !stopped(); done = Atomics.load(shared, DONE)) {
        const wait = Atomics.waitAsync(shared, DONE, done, 100);
        if (wait.async) await Promise.race([wait.value, loop]);
      }
      if (failure) throw failure;
    },
    async close() {
      Atomics.store(shared, STOP, 1);
      Atomics.notify(shared, ASKED);
      await loop;
      await thread.close();
    },
  };
}
