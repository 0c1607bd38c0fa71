/**
 * COPY ... TO STDOUT and COPY ... FROM STDIN over the `pg` client's own protocol support, streamed both ways with
 * backpressure, so memory stays flat whatever the table's size (pg-copy-streams is not a dependency).
 *
 * Why this works: `client.query()` accepts any "submittable" (an object with `submit(connection)`); the client
 * hands it every message of its turn (copyData, copyInResponse, commandComplete, error, readyForQuery). Out: the
 * socket is paused while the file's buffer is full, so at most one socket read's worth of rows is ever held. In:
 * chunks are written to the socket as the file yields them, waiting on 'drain'.
 */
import type { Readable, Writable } from 'node:stream';
import type pg from 'pg';

interface Connection {
  stream: NodeJS.ReadableStream & NodeJS.WritableStream & { writableNeedDrain?: boolean };
  query(text: string): void;
  sendCopyFromChunk(chunk: Buffer): void;
  endCopyFrom(): void;
  sendCopyFail(msg: string): void;
}

/** One COPY statement as a submittable: settles when the server says ready for the next query. */
abstract class CopySubmittable {
  protected failed: Error | undefined;
  private settle!: { resolve: (rows: number) => void; reject: (err: Error) => void };
  private rows = 0;
  readonly done: Promise<number>;
  constructor(private readonly text: string) {
    this.done = new Promise((resolve, reject) => {
      this.settle = { resolve, reject };
    });
  }
  submit(connection: Connection): void {
    connection.query(this.text);
  }
  handleCommandComplete(msg: { text?: string }): void {
    const m = /^COPY (\d+)/.exec(msg.text ?? '');
    if (m) this.rows = Number(m[1]);
  }
  handleError(err: Error): void {
    this.failed ??= err;
  }
  handleReadyForQuery(_connection?: Connection): void {
    if (this.failed) this.settle.reject(this.failed);
    else this.settle.resolve(this.rows);
  }
  handleRowDescription(): void {}
  handleDataRow(): void {}
  handleEmptyQuery(): void {}
  handlePortalSuspended(): void {}
  handleCopyInResponse(connection: Connection): void {
    connection.sendCopyFail('memory-warden: no rows to send');
  }
  handleCopyData(_msg: { chunk: Buffer }, _connection: Connection): void {}
}

/** Rows (one CopyData message each) are gathered into 64 kB pieces: one write per piece, not one per row. */
const PIECE = 64 * 1024;

class CopyOut extends CopySubmittable {
  private paused = false;
  private piece = Buffer.allocUnsafe(PIECE);
  private used = 0;
  constructor(text: string, private readonly sink: Writable) {
    super(text);
  }
  override handleCommandComplete(msg: { text?: string }): void {
    this.flush(undefined);
    super.handleCommandComplete(msg);
  }
  /** The socket may still be paused for the last rows: the next query must not wait on a 'drain' that is over. */
  override handleReadyForQuery(connection?: Connection): void {
    this.flush(undefined);
    if (this.paused && connection) {
      this.paused = false;
      connection.stream.resume();
    }
    super.handleReadyForQuery();
  }
  override handleCopyData(msg: { chunk: Buffer }, connection: Connection): void {
    // The parser's chunk is a view of a buffer it reuses for the next socket read: it is copied, never kept.
    const chunk = msg.chunk;
    if (this.used + chunk.length > PIECE) this.flush(connection);
    if (chunk.length > PIECE) {
      this.write(Buffer.from(chunk), connection);
      return;
    }
    chunk.copy(this.piece, this.used);
    this.used += chunk.length;
  }
  private flush(connection: Connection | undefined): void {
    if (this.used === 0) return;
    const full = this.piece.subarray(0, this.used);
    this.piece = Buffer.allocUnsafe(PIECE);
    this.used = 0;
    this.write(full, connection);
  }
  private write(buf: Buffer, connection: Connection | undefined): void {
    if (this.sink.write(buf) || this.paused || !connection) return;
    this.paused = true;
    connection.stream.pause();
    this.sink.once('drain', () => {
      if (!this.paused) return;
      this.paused = false;
      connection.stream.resume();
    });
  }
}

class CopyIn extends CopySubmittable {
  constructor(text: string, private readonly source: Readable) {
    super(text);
  }
  override handleCopyInResponse(connection: Connection): void {
    void this.pump(connection);
  }
  private async pump(connection: Connection): Promise<void> {
    try {
      for await (const chunk of this.source) {
        connection.sendCopyFromChunk(chunk as Buffer);
        if (connection.stream.writableNeedDrain) await new Promise((r) => connection.stream.once('drain', r));
      }
      connection.endCopyFrom();
    } catch (err) {
      this.failed ??= err as Error;
      connection.sendCopyFail(`memory-warden: reading the rows failed: ${(err as Error).message}`);
    }
  }
}

/** Runs `COPY ... TO STDOUT` into `sink` (not ended here); resolves to the row count the server reports. */
export async function copyOut(client: pg.ClientBase, sql: string, sink: Writable): Promise<number> {
  const q = new CopyOut(sql, sink);
  void client.query(q as never);
  return q.done;
}

/** Runs `COPY ... FROM STDIN` from `source`; resolves to the row count the server reports. */
export async function copyIn(client: pg.ClientBase, sql: string, source: Readable): Promise<number> {
  const q = new CopyIn(sql, source);
  void client.query(q as never);
  return q.done;
}
