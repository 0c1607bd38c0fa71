import { fork } from 'node:child_process';
import type { Config } from '../config/config.js';
import type { JobContext, JobDefinition, JobMap } from '../job/job.js';
import { coerceError, storeError, WardenError, type ErrorKind } from '../core/errors.js';
import { layoutFor } from '../layouts/registry.js';

/*
 * A store job whose files a native driver reads (a layout with sqliteEngine `libsql`: Mastra) runs in a process of
 * its own. libsql's driver aborts the process it runs in (SIGABRT, no exception) on some inputs; in the worker that
 * would stop every other store's jobs. Here only the job's process ends: the job fails with what ended it, and the
 * worker goes on. The job's run (payload checked, run recorded, scheduled run claimed, errors redacted) stays with
 * the worker's runJob; only `run` itself moves (src/commands/job-process.ts is the other side). The child has no task
 * queues (drift reads its sources inline, as under `memory-warden run`) and its clock continues the worker's.
 */

/** What the job's process sends: its log lines, then its result or its error. */
export type JobProcessMessage =
  | { kind: 'log'; line: string }
  | { kind: 'done'; result: unknown }
  | { kind: 'failed'; error: { kind: ErrorKind; message: string } };

/** What the worker sends the job's process: the job, then perhaps an abort. */
export type WorkerMessage = { kind: 'run'; name: string; payload: unknown; config: Config; now: number } | { kind: 'abort' };

/** Whether a store's jobs run in a process of their own. */
export function runsApart(config: Config, store: string | null): boolean {
  const sc = store === null ? undefined : config.stores[store];
  return sc !== undefined && layoutFor(sc).sqliteEngine === 'libsql';
}

/** The job map with each job's `run` moved into a process started from `script`. */
export function inOwnProcess(jobs: JobMap, script: string): JobMap {
  const out: Record<string, JobDefinition<any, any>> = {};
  for (const [name, job] of Object.entries(jobs)) out[name] = { ...job, run: (payload: unknown, ctx: JobContext) => runApart(script, name, payload, ctx) };
  return out;
}

const LEVELS: Record<number, 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal'> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };

/** A pino line of the job's process, logged through the worker's logger (its bindings: job, store, attempt). */
function relay(ctx: JobContext, line: string): void {
  try {
    const { level, msg, time: _t, pid: _p, hostname: _h, ...fields } = JSON.parse(line) as Record<string, unknown>;
    ctx.log[LEVELS[Number(level)] ?? 'info'](fields, typeof msg === 'string' ? msg : '');
  } catch {
    ctx.log.info({ line: line.slice(0, 1000) }, 'job process output');
  }
}

function runApart(script: string, name: string, payload: unknown, ctx: JobContext): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const child = fork(script, [], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let settled = false;
    const abort = () => {
      if (child.connected) child.send({ kind: 'abort' } satisfies WorkerMessage);
    };
    ctx.signal.addEventListener('abort', abort, { once: true });
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      ctx.signal.removeEventListener('abort', abort);
      fn();
    };
    child.on('message', (m: JobProcessMessage) => {
      if (m.kind === 'log') relay(ctx, m.line);
      else if (m.kind === 'done') settle(() => resolve(m.result));
      else if (m.kind === 'failed') settle(() => reject(new WardenError(m.error.kind, m.error.message)));
    });
    child.on('error', (err) => settle(() => reject(coerceError(err, `${name}: its process`))));
    // 'close', not 'exit': every message the process sent has arrived by then.
    child.on('close', (code, signal) => settle(() => reject(storeError(
      `${name}: the job's process ${signal ? `was killed by ${signal}` : `exited with code ${code}`} before it finished (a native driver that aborts on what a store holds ends only that process: the worker and other stores' jobs go on)`,
    ))));
    try {
      child.send({ kind: 'run', name, payload, config: ctx.config, now: ctx.now() } satisfies WorkerMessage);
      if (ctx.signal.aborted) abort();
    } catch (err) {
      child.kill('SIGKILL');
      settle(() => reject(coerceError(err, `${name}: start its process`)));
    }
  });
}
