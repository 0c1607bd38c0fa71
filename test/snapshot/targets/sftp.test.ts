import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTarget } from '../../../src/snapshot/targets/registry.js';
import type { WardenError } from '../../../src/core/errors.js';
import { CHUNK, DEPTH, closeRemote, openRemote, readAll } from '../../../src/snapshot/targets/sftp/pipelined.js';
import SftpClient from 'ssh2-sftp-client';
import { sftpPlace, type TargetPlace } from './fixtures.js';

async function* bytes(b: Buffer, chunk = b.length || 1): AsyncIterable<Buffer> {
  for (let i = 0; i < b.length; i += chunk) yield b.subarray(i, i + chunk);
}
const hex = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const SNAP = '2026-11-29T020000Z';
const failure = (p: Promise<unknown>) => p.then(() => { throw new Error('expected a failure'); }, (e: WardenError) => e);

describe('sftp target', () => {
  let place: TargetPlace;
  beforeAll(async () => {
    place = await sftpPlace();
  }, 60_000);
  afterAll(() => place.stop());

  it('refuses a host whose key is not the configured one', async () => {
    const err = await failure(openTarget(place.config({ hostKeySha256: `SHA256:${'A'.repeat(43)}` }), 'agent'));
    expect(err.message).toMatch(/presented host key SHA256:.*config says SHA256:AAAA.*not connecting/);
    expect(err.transient).toBe(false);
  });

  it('refuses a private key file others can read', async () => {
    const loose = join(place.sshd!.home, 'loose_key');
    copyFileSync(place.sshd!.keyFile, loose);
    chmodSync(loose, 0o644);
    const err = await failure(openTarget(place.config({ privateKeyFile: loose }), 'agent'));
    expect(err.message).toMatch(/loose_key is readable by others.*chmod 600/);
  });

  it('an unreachable host is transient', async () => {
    const err = await failure(openTarget(place.config({ port: 9, timeoutMs: 2000 }), 'agent'));
    expect(err.transient).toBe(true);
  });

  it('temp files a killed upload left are invisible to keys() and removed by cleanPartial', async () => {
    const cfg = place.config() as { path: string };
    const t = await openTarget(cfg as never, 'agent');
    await t.put(SNAP, 'store.db', bytes(Buffer.from('db')));
    await t.put(SNAP, 'manifest.json', bytes(Buffer.from('{}')));
    const dir = join(cfg.path, 'agent', SNAP);
    mkdirSync(join(dir, 'qdrant'), { recursive: true });
    writeFileSync(join(dir, 'qdrant', '.tmp-abcd1234-0-m.snapshot'), 'half');
    expect(await t.keys(SNAP)).toEqual(['manifest.json', 'store.db']);
    expect(await t.cleanPartial()).toEqual([`box:${SNAP}/qdrant/.tmp-abcd1234-0-m.snapshot`]);
    expect(existsSync(join(dir, 'qdrant', '.tmp-abcd1234-0-m.snapshot'))).toBe(false);
    await t.close();
  });

  it('a put is confirmed without reading the file back (verifyUploads: read-back reads it whole); the file on the server is exact', async () => {
    const b = randomBytes(3 * DEPTH * CHUNK + 777);
    for (const [verify, reads] of [['auto', 0], ['read-back', Math.ceil(b.length / CHUNK)]] as const) {
      const cfg = place.config({ verifyUploads: verify }) as { path: string };
      const t = await openTarget(cfg as never, 'agent');
      // The session the target writes through (a real sshd): its read requests counted as they are sent.
      const raw = (t as unknown as { raw: { read: (...a: unknown[]) => unknown } }).raw;
      const read = raw.read.bind(raw);
      let asked = 0;
      raw.read = (...a: unknown[]) => (asked++, read(...a));
      try {
        expect(await t.put(SNAP, 'store.db', bytes(b, 100_000))).toEqual({ bytes: b.length, sha256: hex(b) });
        expect(readFileSync(join(cfg.path, 'agent', SNAP, 'store.db')).equals(b)).toBe(true);
        expect(asked, verify).toBeGreaterThanOrEqual(reads);
        if (verify === 'auto') expect(asked).toBe(0);
      } finally {
        raw.read = read;
        await t.close();
      }
    }
  });

  it('pipelined writes and reads keep every byte in place at request and window boundaries', async () => {
    const cfg = place.config() as { path: string };
    const t = await openTarget(cfg as never, 'agent');
    try {
      const sizes = [1, CHUNK - 1, CHUNK, CHUNK + 1, DEPTH * CHUNK, DEPTH * CHUNK + 1, 3 * DEPTH * CHUNK + 12345];
      for (const [i, size] of sizes.entries()) {
        const b = randomBytes(size);
        // odd source chunks: requests that straddle chunks, and chunks larger than one SFTP request
        const key = `f${i}`;
        expect(await t.put(SNAP, key, bytes(b, i % 2 ? 1000 : 300_001)), `${size} bytes`).toEqual({ bytes: size, sha256: hex(b) });
        expect(readFileSync(join(cfg.path, 'agent', SNAP, key)).equals(b), `${size} bytes on the server`).toBe(true);
        const chunks: Buffer[] = [];
        for await (const c of await t.get(SNAP, key, undefined, size)) chunks.push(Buffer.from(c));
        expect(Buffer.concat(chunks).equals(b), `${size} bytes read back`).toBe(true);
      }
      // a reader that stops early closes its handle; the session goes on working
      for await (const _ of await t.get(SNAP, `f${sizes.length - 1}`, undefined, 1 << 30)) break;
      expect((await t.keys(SNAP)).length).toBe(sizes.length);
    } finally {
      await t.close();
    }
  });

  it('a read with a limit asks for nothing at or past it, whatever the file holds', async () => {
    const sshd = place.sshd!;
    const file = join(sshd.home, 'longer-than-asked');
    const b = randomBytes(3 * DEPTH * CHUNK + 5);
    writeFileSync(file, b);
    const client = new SftpClient('test');
    const raw = await client.connect({ host: sshd.host, port: sshd.port, username: sshd.username, privateKey: readFileSync(sshd.keyFile, 'utf8') });
    try {
      const asked: Array<[number, number]> = [];
      const spy = new Proxy(raw, { get: (t, p) => (p === 'read' ? (h: Buffer, buf: Buffer, off: number, len: number, pos: number, cb: unknown) => { asked.push([pos, len]); return t.read(h, buf, off, len, pos, cb as never); } : Reflect.get(t, p)) });
      for (const limit of [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, DEPTH * CHUNK + 7]) {
        asked.length = 0;
        const handle = await openRemote(raw, file, 'r');
        const chunks: Buffer[] = [];
        for await (const c of readAll(spy, handle, DEPTH, CHUNK, limit)) chunks.push(c);
        await closeRemote(raw, handle);
        expect(Buffer.concat(chunks).equals(b.subarray(0, limit)), `limit ${limit}`).toBe(true);
        expect(asked.every(([pos, len]) => pos + len <= limit), `limit ${limit}`).toBe(true);
      }
    } finally {
      await client.end();
    }
  });

  it('a short read in mid-file is followed by a read of the rest, not a gap', async () => {
    // OpenSSH answers a READ longer than its limit (256 KiB less 1 KiB) with that much: ask for 1 MiB at a time,
    // past the limit ssh2 learnt from the server, and every answer but the last is short.
    const sshd = place.sshd!;
    const file = join(sshd.home, 'short-reads');
    const b = randomBytes(5 * 1024 * 1024 + 777);
    writeFileSync(file, b);
    const client = new SftpClient('test');
    const raw = await client.connect({ host: sshd.host, port: sshd.port, username: sshd.username, privateKey: readFileSync(sshd.keyFile, 'utf8') });
    try {
      (raw as unknown as { _maxReadLen: number })._maxReadLen = 4 * 1024 * 1024;
      const handle = await openRemote(raw, file, 'r');
      const chunks: Buffer[] = [];
      for await (const c of readAll(raw, handle, 4, 1024 * 1024)) chunks.push(c);
      await closeRemote(raw, handle);
      expect(chunks.some((c) => c.length < 1024 * 1024 && c !== chunks.at(-1))).toBe(true); // short answers did happen
      expect(Buffer.concat(chunks).equals(b)).toBe(true);
    } finally {
      await client.end();
    }
  });
});
