/**
 * An agent-like writer: inserts a memory every `intervalMs` into a store with a 5 s busy timeout, as an agent
 * would, and reports how long each write waited and how many failed. Used by the prune benchmark and by the test
 * that proves prune never makes an agent see `database is locked`.
 *
 *   node dist/bench/agent-writer.js STORE [intervalMs] — runs until SIGTERM, then prints one JSON line.
 */
import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';

const [path, intervalArg] = process.argv.slice(2);
if (!path) {
  process.stderr.write('usage: agent-writer STORE [intervalMs]\n');
  process.exit(2);
}
const intervalMs = Number(intervalArg ?? 2);

const db = new Database(path, { fileMustExist: true, timeout: 5000 });
db.pragma('foreign_keys = ON');
const insert = db.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES (?, 'user', 'agent wrote this during maintenance', 'message:agent')`);

const latencies: number[] = [];
const errors: string[] = [];
let stopping = false;

function writeOnce(): void {
  const t0 = process.hrtime.bigint();
  try {
    insert.run(`agent_${randomUUID()}`);
  } catch (err) {
    errors.push((err as Error).message);
  }
  latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
}

function pct(sorted: number[], p: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function finish(): void {
  const sorted = [...latencies].sort((a, b) => a - b);
  const round = (n: number) => Math.round(n * 100) / 100;
  process.stdout.write(
    JSON.stringify({ writes: latencies.length, errors: errors.length, firstError: errors[0] ?? null, p50: round(pct(sorted, 50)), p99: round(pct(sorted, 99)), max: round(sorted.at(-1) ?? 0) }) + '\n',
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
