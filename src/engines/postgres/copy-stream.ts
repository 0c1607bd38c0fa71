/**
 * COPY ... TO STDOUT and COPY ... FROM STDIN over the `pg` client's own protocol support, streamed both ways with
 * backpressure, so memory stays flat whatever the table's size (pg-copy-streams is not a dependency).
 *
 * Why this works: `client.query()` accepts any "submittable" (an object with `submit(connection)`); the client
 * hands it every message of its turn (copyData, copyInResponse, commandComplete, error, readyForQuery). Out: the
 * rows' CopyData framing is read off the socket here (CopyOut.readRaw), not one message object per row, and the
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

/** One COPY statement as a submittable: settles at its error, else when the server says ready for the next query. */
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
  /**
   * The client hands a query its error and forgets it: the ReadyForQuery after it goes to no one, so the COPY
   * settles here (the client sends nothing more until that ReadyForQuery is read).
   */
  handleError(err: Error, _connection?: Connection): void {
    this.failed ??= err;
    this.settle.reject(this.failed);
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

const COPY_DATA = 0x64; // 'd'
const COPY_OUT_RESPONSE = 0x48; // 'H'

/**
 * Whether `buf[at..at+len+1)` is a CopyOutResponse message (code, length, overall format, column count, each column's
 * format): its exact shape, which the tail of any other message is not.
 */
function isCopyOutResponse(buf: Buffer, at: number, len: number): boolean {
  if (buf[at] !== COPY_OUT_RESPONSE || len < 7) return false;
  const format = buf[at + 5]!;
  const columns = buf.readUInt16BE(at + 6);
  if (format > 1 || len !== 7 + 2 * columns) return false;
  for (let i = 0; i < columns; i++) if (buf.readUInt16BE(at + 8 + 2 * i) !== format) return false;
  return true;
}

class CopyOut extends CopySubmittable {
  private paused = false;
  private piece = Buffer.allocUnsafe(PIECE);
  private used = 0;
  /**
   * The socket's bytes read here while the rows stream (framing read in place, no message object per row), from the
   * query to the end of its rows; everything else goes to the client's own parser, as it arrived.
   */
  private raw: { state: 'before' | 'rows'; carry: Buffer | undefined; left: number; parser(bytes: Buffer): void; back(rest: Buffer | undefined): void } | undefined;
  constructor(text: string, private readonly sink: Writable) {
    super(text);
  }
  override submit(connection: Connection): void {
    this.readRaw(connection);
    super.submit(connection);
  }
  /**
   * The client's parser set aside for this COPY's rows: its one 'data' listener on the socket is replaced by one that
   * frames the messages here. It is handed back (with the bytes from the first message that is not a row on) at
   * the rows' end (CopyDone), at an error, at anything unforeseen; with more than one listener it is never taken.
   */
  private readRaw(connection: Connection): void {
    const stream = connection.stream as unknown as NodeJS.EventEmitter;
    const listeners = stream.listeners('data');
    if (listeners.length !== 1) return;
    const parser = listeners[0] as (chunk: Buffer) => void;
    const ours = (chunk: Buffer): void => this.onData(chunk, connection);
    stream.removeListener('data', parser);
    stream.on('data', ours);
    this.raw = {
      state: 'before', carry: undefined, left: 0, parser,
      back: (rest) => {
        this.raw = undefined;
        stream.removeListener('data', ours);
        stream.on('data', parser);
        if (rest && rest.length > 0) parser(rest);
      },
    };
  }
  private onData(chunk: Buffer, connection: Connection): void {
    const raw = this.raw;
    if (!raw) return;
    let buf = chunk;
    if (raw.carry) {
      buf = Buffer.concat([raw.carry, chunk]);
      raw.carry = undefined;
    }
    let at = 0;
    // The rest of a row begun in an earlier piece of the socket's stream.
    if (raw.left > 0) {
      const n = Math.min(raw.left, buf.length);
      this.take(buf, 0, n, connection);
      raw.left -= n;
      at = n;
    }
    while (at < buf.length) {
      if (buf.length - at < 5) {
        raw.carry = Buffer.from(buf.subarray(at));
        return;
      }
      const code = buf[at]!;
      const len = buf.readUInt32BE(at + 1);
      if (raw.state === 'rows' && code === COPY_DATA && len >= 4) {
        const end = Math.min(at + 1 + len, buf.length);
        this.take(buf, at + 5, end, connection);
        raw.left = at + 1 + len - end;
        at = end;
        continue;
      }
      if (raw.state === 'before' && code === COPY_OUT_RESPONSE) {
        if (at + 1 + len > buf.length && len < 4096) {
          raw.carry = Buffer.from(buf.subarray(at));
          return;
        }
        if (isCopyOutResponse(buf, at, len)) {
          // The client's parser sees the response, as it would have (it only notes it).
          raw.state = 'rows';
          raw.parser(buf.subarray(at, at + 1 + len));
          at += 1 + len;
          continue;
        }
      }
      // CopyDone, an error, a notice, or a reply that is not a COPY's: the client's parser reads on from here.
      raw.back(buf.subarray(at));
      return;
    }
  }
  override handleCommandComplete(msg: { text?: string }): void {
    this.flush(undefined);
    super.handleCommandComplete(msg);
  }
  /** The socket may still be paused for the last rows: the next query must not wait on a 'drain' that is over. */
  override handleReadyForQuery(connection?: Connection): void {
    this.flush(undefined);
    this.unpause(connection);
    super.handleReadyForQuery();
  }
  /** The rows end here: the socket back with the client's parser, and read on to the ReadyForQuery. */
  override handleError(err: Error, connection?: Connection): void {
    this.raw?.back(undefined);
    this.unpause(connection);
    super.handleError(err);
  }
  private unpause(connection: Connection | undefined): void {
    if (this.paused && connection) {
      this.paused = false;
      connection.stream.resume();
    }
  }
  override handleCopyData(msg: { chunk: Buffer }, connection: Connection): void {
    // The parser's chunk is a view of a buffer it reuses for the next socket read: it is copied, never kept.
    const chunk = msg.chunk;
    this.take(chunk, 0, chunk.length, connection);
  }
  /** `buf[from..to)` (rows' bytes, whole or in part) copied into the pieces, which are written as they fill. */
  private take(buf: Buffer, from: number, to: number, connection: Connection): void {
    if (this.used + (to - from) > PIECE) this.flush(connection);
    if (to - from > PIECE) {
      this.write(Buffer.from(buf.subarray(from, to)), connection);
      return;
    }
    buf.copy(this.piece, this.used, from, to);
    this.used += to - from;
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
        // The server refused the rows (it drops any sent after): nothing more is sent.
        if (this.failed) return;
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
