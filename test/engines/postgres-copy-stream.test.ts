import { createHash } from 'node:crypto';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { copyOut } from '../../src/engines/postgres/copy-stream.js';

// COPY ... TO STDOUT read off the socket (src/engines/postgres/copy-stream.ts): the rows' CopyData framing read there,
// not by the client's parser, whatever the sizes the socket hands the bytes over in, and the client's parser given
// back everything else (the end of the rows, an error) so the connection goes on.
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function nativeDb(): Promise<TestDatabase> {
  const db = await createTestDatabase('pgcopy');
  cleanups.push(() => db.drop());
  return db;
}

/**
 * A TCP relay to the server that hands the server's bytes to the client in pieces of the given sizes, in turn, each
 * written on its own turn of the event loop (no delay on the socket): messages and their headers cut anywhere.
 */
async function rechunkingRelay(target: string, sizes: readonly number[]): Promise<string> {
  const u = new URL(target);
  const server: Server = createServer((client: Socket) => {
    client.setNoDelay(true);
    const upstream = connect(Number(u.port || 5432), u.hostname);
    client.pipe(upstream);
    let turn = 0;
    upstream.on('data', (data: Buffer) => {
      upstream.pause();
      void (async () => {
        for (let at = 0; at < data.length; ) {
          const n = sizes[turn++ % sizes.length]!;
          client.write(data.subarray(at, at + n));
          at += n;
          await new Promise((r) => setImmediate(r));
        }
        upstream.resume();
      })();
    });
    upstream.on('end', () => client.end());
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
    client.on('close', () => upstream.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => new Promise((r) => server.close(r)));
  const relayed = new URL(target);
  relayed.hostname = '127.0.0.1';
  relayed.port = String((server.address() as AddressInfo).port);
  return relayed.toString();
}

async function clientOf(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  cleanups.push(() => c.end().catch(() => {}));
  return c;
}

/** What copyOut writes, gathered; and how many CopyData messages the client's parser made for it. */
async function copied(client: pg.Client, sql: string): Promise<{ rows: number; bytes: Buffer; messages: number }> {
  const parts: Buffer[] = [];
  const sink = new Writable({ write(chunk: Buffer, _enc, done) { parts.push(Buffer.from(chunk)); done(); } });
  let messages = 0;
  const connection = (client as unknown as { connection: NodeJS.EventEmitter }).connection;
  const count = () => messages++;
  connection.on('copyData', count);
  try {
    const rows = await copyOut(client, sql, sink);
    return { rows, bytes: Buffer.concat(parts), messages };
  } finally {
    connection.removeListener('copyData', count);
  }
}

/** Texts COPY escapes, multi-byte UTF-8, an empty text, and a row of 300 kB (more than a piece of any reader). */
async function fillTable(c: pg.ClientBase): Promise<number> {
  await c.query(`CREATE TABLE t (n int PRIMARY KEY, v text)`);
  await c.query(`INSERT INTO t SELECT g, 'row ' || g || E' tab\\there nl\\nthere back\\\\slash cr\\r ü✓ 🐝' FROM generate_series(1, 3000) g`);
  await c.query(`INSERT INTO t VALUES (3001, ''), (3002, NULL), (3003, repeat('x', 300000) || E'\\tend')`);
  return 3003;
}

describe('copyOut: the rows\' framing read off the socket', () => {
  it('the bytes COPY sends, whatever pieces the socket cuts them in (headers and rows split, a row larger than any piece), with no message made per row; the connection goes on', async () => {
    const db = await nativeDb();
    const rows = await fillTable(db.client);
    // The reference: the server's own text through psql-free means, read by pg's parser on a connection whose
    // socket has a second 'data' listener (copyOut then leaves the parser in place).
    const plain = await clientOf(db.url);
    (plain as unknown as { connection: { stream: NodeJS.EventEmitter } }).connection.stream.on('data', () => {});
    const want = await copied(plain, 'COPY t TO STDOUT');
    expect(want.rows).toBe(rows);
    expect(want.messages).toBe(rows);
    expect(want.bytes.toString('utf8')).toContain('tab\\there nl\\nthere back\\\\slash cr\\r ü✓ 🐝\n');
    for (const sizes of [[2, 3, 5, 7], [4, 1, 6, 11, 13, 5000], [65536]]) {
      const client = await clientOf(await rechunkingRelay(db.url, sizes));
      const got = await copied(client, 'COPY t TO STDOUT');
      expect(got.rows, `pieces of ${sizes.join(',')} bytes`).toBe(rows);
      expect(createHash('sha256').update(got.bytes).digest('hex'), `pieces of ${sizes.join(',')} bytes`).toBe(createHash('sha256').update(want.bytes).digest('hex'));
      expect(got.messages, 'no CopyData message object made').toBe(0);
      // The client's parser has the socket back: the next statements on the connection are answered.
      expect((await client.query('SELECT count(*)::int AS n FROM t')).rows[0].n).toBe(rows);
      const again = await copied(client, `COPY (SELECT n FROM t WHERE n <= 5) TO STDOUT`);
      expect(again.bytes.toString()).toBe('1\n2\n3\n4\n5\n');
    }
    // A byte at a time.
    const client = await clientOf(await rechunkingRelay(db.url, [1]));
    const few = 'COPY (SELECT * FROM t WHERE n <= 40 OR n > 3000) TO STDOUT';
    const bytewise = await copied(client, few);
    expect(bytewise.bytes.equals((await copied(plain, few)).bytes)).toBe(true);
    expect(bytewise.messages).toBe(0);
  }, 120_000);

  it('an error after rows were sent fails the COPY with the server\'s error, and the connection goes on', async () => {
    const db = await nativeDb();
    await fillTable(db.client);
    for (const sizes of [[3, 1, 7], [65536]]) {
      const client = await clientOf(await rechunkingRelay(db.url, sizes));
      await expect(copied(client, 'COPY (SELECT n, 1 / (2000 - n) FROM t ORDER BY n) TO STDOUT')).rejects.toThrow(/division by zero/);
      expect((await client.query('SELECT 41 + 1 AS n')).rows[0].n).toBe(42);
      // An error before any row, and one in the statement: the same.
      await expect(copied(client, 'COPY no_such_table TO STDOUT')).rejects.toThrow(/no_such_table/);
      await expect(copied(client, 'COPY (SELECT 1/0) TO STDOUT')).rejects.toThrow(/division by zero/);
      const after = await copied(client, 'COPY (SELECT 7) TO STDOUT');
      expect(after.bytes.toString()).toBe('7\n');
    }
  }, 120_000);

  it('a COPY in binary format is read the same way', async () => {
    const db = await nativeDb();
    await db.client.query(`CREATE TABLE b (x bytea)`);
    await db.client.query(`INSERT INTO b VALUES ('\\x00010203ff'::bytea)`);
    const client = await clientOf(await rechunkingRelay(db.url, [2, 9]));
    const got = await copied(client, 'COPY b TO STDOUT (FORMAT binary)');
    expect(got.bytes.subarray(0, 11).toString('latin1')).toBe('PGCOPY\n\xff\r\n\0');
    expect(got.bytes.includes(Buffer.from([0, 1, 2, 3, 0xff]))).toBe(true);
    expect(got.messages).toBe(0);
  }, 60_000);
});
