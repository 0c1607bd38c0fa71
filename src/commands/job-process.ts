import { pino } from 'pino';
import { JOBS } from '../../jobs/index.js';
import { coerceError } from '../core/errors.js';
import type { JobContext } from '../job/job.js';
import type { JobProcessMessage, WorkerMessage } from '../queue/isolate.js';

// The process a store job runs in when its store's files are read by a native driver (src/queue/isolate.ts): the
// worker forks it, sends the job, and relays its log lines; it runs the job's `run` and sends back what came of it.
// If the driver aborts, only this process ends.

const send = (m: JobProcessMessage, then: () => void = () => {}) => {
  if (process.connected) process.send!(m, () => then());
  else then();
};
const stop = new AbortController();

process.on('message', (m: WorkerMessage) => {
  if (m.kind === 'abort') {
    stop.abort();
    return;
  }
  const job = JOBS[m.name];
  // The worker's clock, continued: a test's fixed "now" stays where it was.
  const offset = m.now - Date.now();
  const log = pino({ level: 'trace', base: undefined }, { write: (line: string) => send({ kind: 'log', line }) });
  const ctx: JobContext = { config: m.config, log, now: () => Date.now() + offset, signal: stop.signal };
  const finish = (msg: JobProcessMessage) => send(msg, () => process.exit(0));
  if (!job) {
    finish({ kind: 'failed', error: { kind: 'usage', message: `unknown job "${m.name}"` } });
    return;
  }
  job.run(m.payload, ctx).then(
    (result) => finish({ kind: 'done', result }),
    (err) => {
      const e = coerceError(err);
      finish({ kind: 'failed', error: { kind: e.kind, message: e.message } });
    },
  );
});
// The worker went away: stop between batches, as on its shutdown.
process.on('disconnect', () => stop.abort());
