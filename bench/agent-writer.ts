/**
 * An agent-like writer: inserts a memory every `intervalMs` into a store with a 5 s busy timeout, as an agent
 * would, and reports how long each write waited and how many failed. Used by the prune benchmark and by the test
 * that proves prune never makes an agent see `database is locked`.
 *
 *   node dist/bench/agent-writer.js STORE [intervalMs] [split|full ...] — runs until SIGTERM, then prints one JSON line.
 *
 * With `full`, the agent commits with `synchronous = FULL`: each commit fsyncs the WAL before it returns (an agent
 * that must not lose its last write to a power cut). Without it, `synchronous = NORMAL`, WAL: commits never fsync,
 * only its own checkpoints do.
 *
 * With `split`, SQLite's busy handler is played in JavaScript (its schedule: 1, 2, 5, 10, 15, 20, 25 … ms between
 * tries), so that each write's time comes in two parts: `wait`, the tries the lock refused, and `own`, the try that
 * got in (its commit, and any checkpoint its commit ran: SQLite's autocheckpoint, at 1,000 frames in the WAL).
 */
import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';

const [path, intervalArg, ...modes] = process.argv.slice(2);
if (!path) {
  process.stderr.write('usage: agent-writer STORE [intervalMs] [split|full ...]\n');
  process.exit(2);
}
const intervalMs = Number(intervalArg ?? 2);
const split = modes.includes('split');
const full = modes.includes('full');

const db = new Database(path, { fileMustExist: true, timeout: split ? 0 : 5000 });
db.pragma('foreign_keys = ON');
db.pragma(`synchronous = ${full ? 'FULL' : 'NORMAL'}`);
const insert = db.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES (?, 'user', 'agent wrote this during maintenance', 'message:agent')`);

const latencies: number[] = [];
const own: number[] = [];
const errors: string[] = [];
let stopping = false;

/** SQLite's busy handler (sqliteDefaultBusyCallback): the sleeps between tries, up to the 5 s timeout. */
const DELAYS = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100];
const sleeper = new Int32Array(new SharedArrayBuffer(4));

function writeOnce(): void {
  const t0 = performance.now();
  try {
    if (!split) insert.run(`agent_${randomUUID()}`);
    else {
      for (let tries = 0; ; tries++) {
        const at = performance.now();
        try {
          insert.run(`agent_${randomUUID()}`);
          own.push(performance.now() - at);
          break;
        } catch (err) {
          if (!String((err as { code?: string }).code).startsWith('SQLITE_BUSY') || at - t0 >= 5000) throw err;
        }
        Atomics.wait(sleeper, 0, 0, DELAYS[Math.min(tries, DELAYS.length - 1)]);
      }
    }
  } catch (err) {
    errors.push((err as Error).message);
  }
  latencies.push(performance.now() - t0);
}

function pct(sorted: number[], p: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function finish(): void {
  const sorted = [...latencies].sort((a, b) => a - b);
  const round = (n: number) => Math.round(n * 100) / 100;
  const ownSorted = [...own].sort((a, b) => a - b);
  const parts = split ? { ownP99: round(pct(ownSorted, 99)), ownMax: round(ownSorted.at(-1) ?? 0), ownOver5: own.filter((ms) => ms > 5).length } : {};
  process.stdout.write(
    JSON.stringify({ writes: latencies.length, errors: errors.length, firstError: errors[0] ?? null, p50: round(pct(sorted, 50)), p99: round(pct(sorted, 99)), max: round(sorted.at(-1) ?? 0), ...parts }) + '\n',
  );
  db.close();
  process.exit(0);
}

process.on('SIGTERM', () => (stopping = true));
// A parent that died without stopping it (a test that timed out) must not leave it writing forever.
const parent = process.ppid;
setInterval(() => process.ppid !== parent && (stopping = true), 500).unref();
process.on('SIGINT', () => (stopping = true));
process.stdout.write('ready\n');
const loop = () => {
  if (stopping) return finish();
  writeOnce();
  setTimeout(loop, intervalMs);
};
loop();
