/**
 * An agent on a PostgreSQL warden store, over a connection of its own: inserts a memory every `intervalMs`, and every
 * fifth one supersedes the agent's previous memory (inserts the new version, points the old one at it, in one
 * transaction), as an agent correcting itself does. Reports how long each write took (what it waited on a lock
 * included), every error, and the ids it left live. Used by the PostgreSQL prune benchmark and the test that proves
 * prune beside live agents deletes nothing live and makes no agent fail.
 *
 *   node dist/bench/pg-agent.js URL SCHEMA NAME [intervalMs] — runs until SIGTERM, then prints one JSON line.
 *
 * With PG_AGENT_VECTORS=TABLE, each memory's vector row goes into that table of the schema (`id` the memory's id,
 * `payload` its text; the vector itself left NULL) in the same transaction as the memory, as an agent keeping its
 * vectors in pgvector beside the table does.
 */
import pg from 'pg';

const [url, schema, name, intervalArg] = process.argv.slice(2);
if (!url || !schema || !name) {
  process.stderr.write('usage: pg-agent URL SCHEMA NAME [intervalMs]\n');
  process.exit(2);
}
const intervalMs = Number(intervalArg ?? 2);
const s = `"${schema.replace(/"/g, '""')}"`;
const vectors = process.env.PG_AGENT_VECTORS;
const vectorSql = vectors ? `INSERT INTO ${s}."${vectors.replace(/"/g, '""')}" (id, payload) VALUES ($1, jsonb_build_object('data', $2::text))` : undefined;
const client = new pg.Client({ connectionString: url, application_name: `agent ${name}` });
const latencies: number[] = [];
const errors: string[] = [];
const live: string[] = [];
let superseded = 0;
let stopping = false;
process.on('SIGTERM', () => (stopping = true));

async function writeOnce(i: number): Promise<void> {
  const id = `${name}-${i}`;
  const previous = live.at(-1);
  const t0 = performance.now();
  try {
    if (i % 5 === 4 && previous) {
      await client.query('BEGIN');
      await client.query(`INSERT INTO ${s}.memory (id, subject, fact, source) VALUES ($1, 'user', 'corrected during maintenance', 'message:agent')`, [id]);
      if (vectorSql) await client.query(vectorSql, [id, 'corrected during maintenance']);
      await client.query(`UPDATE ${s}.memory SET superseded_by = $1 WHERE id = $2`, [id, previous]);
      await client.query('COMMIT');
      live.pop();
      superseded += 1;
    } else if (vectorSql) {
      await client.query('BEGIN');
      await client.query(`INSERT INTO ${s}.memory (id, subject, fact, source) VALUES ($1, 'user', 'agent wrote this during maintenance', 'message:agent')`, [id]);
      await client.query(vectorSql, [id, 'agent wrote this during maintenance']);
      await client.query('COMMIT');
    } else {
      await client.query(`INSERT INTO ${s}.memory (id, subject, fact, source) VALUES ($1, 'user', 'agent wrote this during maintenance', 'message:agent')`, [id]);
    }
    live.push(id);
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    errors.push(String((err as Error).message));
  }
  latencies.push(performance.now() - t0);
}

await client.connect();
process.stdout.write('ready\n');
for (let i = 0; !stopping; i++) {
  await writeOnce(i);
  await new Promise((r) => setTimeout(r, intervalMs));
}
await client.end();
const sorted = [...latencies].sort((a, b) => a - b);
const pct = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0;
process.stdout.write(JSON.stringify({ writes: latencies.length, errors, live, superseded, maxMs: sorted.at(-1) ?? 0, p99Ms: pct(0.99), p50Ms: pct(0.5) }) + '\n');
