import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Server } from 'node:http';
import net, { connect } from 'node:net';
import { createLogger } from '../../src/log/logger.js';
import { HTTP_TIMEOUTS } from '../../src/review-web/server.js';
import { daysAgo, memory, NOW, PASSWORD, startSite, type Site } from './fixtures.js';
import { drawPage, linkToken, loginForm, post, signIn } from './http.js';

/**
 * What a client that sends too little, too slowly or garbled gets: a 408 from the server's own timeouts (never a
 * connection left open: the client gives up after 60 s), a 400 with a short page for a body that cannot be read,
 * and nothing above a warning in the log. How long each took is not asserted: that is the machine's load.
 */
interface Line {
  level: number;
  msg: string;
}
function capture(): { log: ReturnType<typeof createLogger>; lines: Line[] } {
  const lines: Line[] = [];
  const log = createLogger({ level: 'debug', destination: { write: (s: string) => lines.push(JSON.parse(s) as Line) } as unknown as NodeJS.WritableStream });
  return { log, lines };
}
const errors = (lines: Line[]) => lines.filter((l) => l.level >= 50);

interface RawReply {
  /** The status of the first response line, or null when the server closed without one. */
  status: number | null;
  text: string;
}

/**
 * One HTTP/1.1 request over a raw socket: `parts` are written in turn, `gapMs` apart; then the socket stays open
 * (`end: false`) or the client stops sending (`end: true`), and the reply is read until the server closes.
 */
function raw(site: Site, parts: (string | Buffer)[], opts: { gapMs?: number; end?: boolean } = {}): Promise<RawReply> {
  const url = new URL(site.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname);
    const chunks: Buffer[] = [];
    let timer: NodeJS.Timeout | undefined;
    socket.on('data', (d) => chunks.push(d));
    socket.on('error', () => undefined); // a reset after the server gave up: the close below says when
    socket.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      resolve({ status: m ? Number(m[1]) : null, text });
    });
    socket.on('connect', () => {
      let i = 0;
      const next = () => {
        if (socket.destroyed) return;
        if (i < parts.length) {
          socket.write(parts[i++]!);
          timer = setTimeout(next, opts.gapMs ?? 0);
        } else if (opts.end) socket.end();
      };
      next();
    });
    setTimeout(() => reject(new Error('the server kept the connection open for 60 s')), 60_000).unref();
  });
}

const head = (path: string, headers: Record<string, string | number>) =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
const form = { 'Content-Type': 'application/x-www-form-urlencoded' };

describe('slow and short requests', { timeout: 90_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });
  const fast = { headersMs: 1000, requestMs: 2000, checkMs: 100, keepAliveMs: 5000 };

  it('a body shorter than its Content-Length, headers never finished, a trickle: each cut by the server\'s timeouts (408)', async () => {
    const { log, lines } = capture();
    site = await startSite({ rows: [{ id: 'm1', confirmed_at: daysAgo(200) }], log, timeouts: fast });
    const cookie = await signIn(site.url, 'agent', NOW);
    const t = linkToken('agent', NOW);
    const body = `t=${t}&user=alice&password=`;
    const cases: Record<string, Promise<RawReply>> = {
      'login, short body': raw(site, [head('/login', { ...form, 'Content-Length': body.length + 500 }) + body]),
      'decide, short body': raw(site, [head('/store/agent/decide', { ...form, Cookie: cookie, 'Content-Length': 1000 }) + 'csrf=x&id=']),
      'headers never finished': raw(site, [`POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-f`]),
      'a byte at a time': raw(site, [head('/login', { ...form, 'Content-Length': 200 }), ...'t=abcdefghijklmnopqrstuvwxyz'], { gapMs: 150 }),
      'headers a byte at a time': raw(site, [...'POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'], { gapMs: 50 }),
    };
    for (const [name, reply] of Object.entries(cases)) {
      expect((await reply).status, name).toBe(408); // the server's timeout answered, not a read of what came
    }
    expect(memory(site, 'm1')!.confirmed_at).toBe(daysAgo(200));
    // A normal request still goes through, on a server that just timed out five.
    expect((await post(site.url, cookie, (await drawPage(site.url, cookie))[0]!.forms.confirm!)).status).toBe(200);
    expect(errors(lines)).toEqual([]);
  });

  it('a client that stops sending mid-body is answered at once (400, not the timeout\'s 408) and logged as a warning at most', async () => {
    const { log, lines } = capture();
    site = await startSite({ rows: [], log });
    const cookie = await signIn(site.url, 'agent', NOW);
    for (const path of ['/login', '/store/agent/decide']) {
      const r = await raw(site, [head(path, { ...form, Cookie: cookie, 'Content-Length': 300 }) + 't=abc'], { end: true });
      expect(r.status, path).toBe(400); // the shipped timeouts (10 s, 20 s) would have answered 408
      // Chunked, cut in the middle of a chunk.
      const c = await raw(site, [head(path, { ...form, Cookie: cookie, 'Transfer-Encoding': 'chunked' }) + '40\r\nt=abc'], { end: true });
      expect(c.status, path).toBe(400);
    }
    expect(errors(lines)).toEqual([]);
  });

  it('the shipped timeouts hold: headers in 10 s, a whole request in 20 s, an idle connection kept 65 s', async () => {
    expect(HTTP_TIMEOUTS).toEqual({ headersMs: 10_000, requestMs: 20_000, checkMs: 1_000, keepAliveMs: 65_000 });
    // What Node's server does with its timeouts the first test sees, with short ones; here, that the review server is
    // given the shipped ones (no test waits 20 s for them).
    const listen = vi.spyOn(net.Server.prototype, 'listen');
    let servers: Server[];
    try {
      site = await startSite({ rows: [] });
      servers = listen.mock.contexts as unknown as Server[];
    } finally {
      listen.mockRestore();
    }
    expect(servers.map((s) => [s.headersTimeout, s.requestTimeout, s.keepAliveTimeout])).toEqual([[HTTP_TIMEOUTS.headersMs, HTTP_TIMEOUTS.requestMs, HTTP_TIMEOUTS.keepAliveMs]]);
  });
});

/** A multipart body as a browser would write it, with the parts given. */
const BOUNDARY = '----mwTestBoundary7MA4YWxkTrZu0gW';
const multipart = (fields: Record<string, string>) =>
  Object.entries(fields).map(([k, v]) => `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`).join('') + `--${BOUNDARY}--\r\n`;

describe('a body that is not a readable form', { timeout: 60_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  it('is a 400 with a short page on /login and /decide, nothing changed, nothing above a warning logged', async () => {
    const { log, lines } = capture();
    site = await startSite({ rows: [{ id: 'm1', confirmed_at: daysAgo(200) }], log });
    const cookie = await signIn(site.url, 'agent', NOW);
    const [card] = await drawPage(site.url, cookie);
    const confirm = card!.forms.confirm!;
    const whole = multipart(confirm);
    const mp = `multipart/form-data; boundary=${BOUNDARY}`;
    const bodies: Record<string, [string, string]> = {
      'no closing boundary': [mp, whole.slice(0, whole.lastIndexOf(`--${BOUNDARY}--`))],
      'cut inside a part': [mp, whole.slice(0, whole.indexOf('name="id"') + 4)],
      'cut inside the headers of a part': [mp, `--${BOUNDARY}\r\nContent-Disposition: form-da`],
      'another boundary in the body': [`multipart/form-data; boundary=other`, whole],
      'no boundary at all': ['multipart/form-data', whole],
      'not multipart at all': [mp, 'hello, world'],
      'an empty body': [mp, ''],
    };
    const signInForm = await loginForm(site.url, 'agent', NOW);
    const loginWhole = multipart({ ...signInForm.fields, user: 'alice', password: PASSWORD });
    for (const [name, [type, body]] of Object.entries(bodies)) {
      const decide = await post(site.url, cookie, body, 'agent', type);
      expect(decide.status, `decide: ${name}`).toBe(400);
      expect(decide.text).toContain('could not be read');
      const loginBody = name === 'no closing boundary' ? loginWhole.slice(0, loginWhole.lastIndexOf(`--${BOUNDARY}--`)) : body;
      const login = await fetch(`${site.url}/login`, { method: 'POST', headers: { 'content-type': type }, body: loginBody, redirect: 'manual' });
      expect(login.status, `login: ${name}`).toBe(400);
      expect(await login.text()).toContain('could not be read');
    }
    expect(memory(site, 'm1')!.confirmed_at).toBe(daysAgo(200));
    expect(errors(lines)).toEqual([]);
    expect(lines.filter((l) => l.msg === 'review page: unreadable request body').length).toBe(2 * Object.keys(bodies).length);

    // Whole, the same forms are read: a multipart sign-in signs in, and the form (its nonce unspent) decides.
    const login = await fetch(`${site.url}/login`, { method: 'POST', headers: { 'content-type': mp, cookie: signInForm.cookie }, body: loginWhole, redirect: 'manual' });
    expect(login.status).toBe(303);
    expect((await post(site.url, cookie, whole, 'agent', mp)).status).toBe(200);
    expect(memory(site, 'm1')!.confirmed_at).not.toBe(daysAgo(200));
  });

  it('a body above the limit is 413, whether its length is announced or it arrives in chunks', async () => {
    const { log, lines } = capture();
    site = await startSite({ rows: [], log });
    const big = 'x'.repeat(300 * 1024);
    const announced = await fetch(`${site.url}/login`, { method: 'POST', headers: form, body: `t=${big}` });
    expect(announced.status).toBe(413);
    const stream = new ReadableStream({
      start(c) {
        for (let i = 0; i < 30; i++) c.enqueue(new TextEncoder().encode('x'.repeat(10 * 1024)));
        c.close();
      },
    });
    const chunked = await fetch(`${site.url}/login`, { method: 'POST', headers: form, body: stream, duplex: 'half' } as RequestInit);
    expect(chunked.status).toBe(413);
    expect(errors(lines)).toEqual([]);
  });
});
