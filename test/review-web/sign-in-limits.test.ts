import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'node:http';
import { constants, closeSync, openSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { hashPasswordLine } from '../../src/review-web/auth.js';
import { clientKey, SignInLimits } from '../../src/review-web/sign-in-limits.js';
import { NOW, PASSWORD, PASSWORD_ENV, startSite, type Site } from './fixtures.js';
import { linkToken } from './http.js';

/**
 * Wrong passwords hold back the party that sends them: counted per client address and account tried (a users
 * file's name; the shared password whatever name is typed), and for a known user also from everywhere.
 * Clients are told apart by their own loopback addresses (127.0.0.2, 127.0.0.3, …: all of 127/8 is this host).
 */
const { PER_NAME, PER_ADDRESS, PER_USER, WINDOW_MS } = SignInLimits;

/** GET or POST from a chosen local address; the status, the body and the cookie set. */
function send(site: Site, from: string, path: string, headers: Record<string, string>, body?: string): Promise<{ status: number; text: string; cookie?: string }> {
  const url = new URL(`${site.url}${path}`);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: url.hostname, port: url.port, path: `${url.pathname}${url.search}`, method: body === undefined ? 'GET' : 'POST', localAddress: from, headers },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, text, cookie: res.headers['set-cookie']?.[0]?.split(';')[0] }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** POST /login from a chosen local address, as a browser's form would after opening the link there; the status. */
async function login(site: Site, from: string, user: string, password: string, headers: Record<string, string> = {}): Promise<number> {
  const t = linkToken('agent', NOW);
  const opened = await send(site, from, `/open?t=${t}`, headers);
  const csrf = /name="csrf" value="([^"]*)"/.exec(opened.text)?.[1] ?? '';
  const body = new URLSearchParams({ t, csrf, user, password }).toString();
  const cookie: Record<string, string> = opened.cookie ? { cookie: opened.cookie } : {};
  return (await send(site, from, '/login', { 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(Buffer.byteLength(body)), ...cookie, ...headers }, body)).status;
}

async function fail(site: Site, times: number, from: string, user: (i: number) => string, headers?: Record<string, string>): Promise<void> {
  for (let i = 0; i < times; i++) expect(await login(site, from, user(i), `guess ${i}`, headers)).toBe(401);
}

describe('sign-in limits', { timeout: 60_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  it('shared password: one address guessing holds back only that address, whatever names it types', async () => {
    site = await startSite({ rows: [] });
    await fail(site, PER_NAME, '127.0.0.2', () => 'alice');
    expect(await login(site, '127.0.0.2', 'alice', PASSWORD)).toBe(429); // still limited, the right password included
    expect(await login(site, '127.0.0.2', 'alice', 'one more guess')).toBe(429);
    // The name beside a shared password is free text: another one is the same password guessed again.
    for (const user of ['bob', 'ALICE', 'alice ', `x${'y'.repeat(70)}`]) expect(await login(site, '127.0.0.2', user, PASSWORD)).toBe(429);
    expect(await login(site, '127.0.0.3', 'alice', PASSWORD)).toBe(303); // alice elsewhere
    expect(await login(site, '127.0.0.4', 'carol', PASSWORD)).toBe(303);
    site.clock.now = NOW + WINDOW_MS;
    expect(await login(site, '127.0.0.2', 'alice', PASSWORD)).toBe(303);
  });

  it('shared password: a new name on each guess buys no more guesses than one name', async () => {
    site = await startSite({ rows: [] });
    await fail(site, PER_NAME, '127.0.0.12', (i) => `reviewer-${i}`);
    expect(await login(site, '127.0.0.12', 'reviewer-new', 'another guess')).toBe(429);
    expect(await login(site, '127.0.0.12', 'reviewer-newer', PASSWORD)).toBe(429);
    expect(await login(site, '127.0.0.13', 'reviewer-new', PASSWORD)).toBe(303);
  });

  it('one address trying many names is held back as a whole; other addresses are not', () => {
    // Users-file names: each is an account of its own, and PER_ADDRESS bounds them together (unit: no scrypt per try).
    const limits = new SignInLimits((user) => ({ name: user, known: false }));
    for (let i = 0; i < PER_ADDRESS; i++) limits.fail('127.0.0.5', `name${i}`, NOW);
    for (const user of ['alice', 'fresh-name']) expect(limits.blocked('127.0.0.5', user, NOW)).toBe(true);
    for (const from of ['127.0.0.6', '127.0.0.7']) expect(limits.blocked(from, 'alice', NOW)).toBe(false);
  });

  it('a users file: wrong passwords for one user stop neither another user nor that user from elsewhere', async () => {
    const usersFile = join(process.env.TMPDIR ?? '/tmp', `mw-limits-users-${process.pid}-${Date.now()}`);
    writeFileSync(usersFile, `${hashPasswordLine('frank', 'frank-secret-1')}\n${hashPasswordLine('grace', 'grace-secret-2')}\n`);
    site = await startSite({ rows: [], review: { auth: { mode: 'users', usersFile } } });
    await fail(site, PER_NAME, '127.0.0.8', () => 'frank');
    expect(await login(site, '127.0.0.8', 'frank', 'frank-secret-1')).toBe(429);
    expect(await login(site, '127.0.0.8', 'grace', 'grace-secret-2')).toBe(303);
    expect(await login(site, '127.0.0.9', 'frank', 'frank-secret-1')).toBe(303);
  });

  it('a users file: one known user guessed from many addresses is held back everywhere; unknown names are not', async () => {
    const usersFile = join(process.env.TMPDIR ?? '/tmp', `mw-limits-spread-${process.pid}-${Date.now()}`);
    writeFileSync(usersFile, `${hashPasswordLine('frank', 'frank-secret-1')}\n${hashPasswordLine('grace', 'grace-secret-2')}\n`);
    site = await startSite({ rows: [], review: { auth: { mode: 'users', usersFile } } });
    const spread = PER_USER / PER_NAME;
    for (let a = 0; a < spread; a++) await fail(site, PER_NAME - 1, `127.0.1.${a + 1}`, () => 'frank');
    // Below every address's own limit; together past frank's.
    await fail(site, PER_USER - spread * (PER_NAME - 1), '127.0.1.50', () => 'frank');
    expect(await login(site, '127.0.1.99', 'frank', 'frank-secret-1')).toBe(429);
    expect(await login(site, '127.0.1.99', 'grace', 'grace-secret-2')).toBe(303);
    // Names nobody has: each address pays for its own, no name is paused for everyone (unit: no scrypt per try).
    const limits = new SignInLimits((user) => ({ name: user, known: user === 'frank' }));
    for (let a = 0; a < 2 * spread; a++) for (let i = 0; i < PER_NAME - 1; i++) limits.fail(`127.0.2.${a + 1}`, 'zed', NOW);
    expect(limits.blocked('127.0.2.99', 'zed', NOW)).toBe(false);
    site.clock.now = NOW + WINDOW_MS;
    expect(await login(site, '127.0.1.99', 'frank', 'frank-secret-1')).toBe(303);
  });

  it('a client header from an address that is not a trusted proxy is not read: the client is its own address', async () => {
    site = await startSite({ rows: [], review: { auth: { mode: 'password', passwordEnv: PASSWORD_ENV, clientHeader: 'X-Forwarded-For', trustedProxies: ['127.0.0.1'] } } });
    await fail(site, PER_NAME, '127.0.0.14', () => 'alice', {});
    for (let i = 0; i < 3; i++) expect(await login(site, '127.0.0.14', 'alice', PASSWORD, { 'X-Forwarded-For': `198.51.100.${i}` })).toBe(429);
    expect(await login(site, '127.0.0.1', 'alice', PASSWORD, { 'X-Forwarded-For': '198.51.100.1' })).toBe(303);
  });

  it('behind a proxy: clients are told apart by the header config names, its last entry only', async () => {
    site = await startSite({ rows: [], review: { auth: { mode: 'password', passwordEnv: PASSWORD_ENV, clientHeader: 'X-Forwarded-For' } } });
    const via = (client: string) => ({ 'X-Forwarded-For': client });
    // Everything comes from the proxy's address; what it appends names the client. A client's own header is before it.
    await fail(site, PER_NAME, '127.0.0.1', () => 'alice', via('203.0.113.9'));
    expect(await login(site, '127.0.0.1', 'alice', PASSWORD, via('203.0.113.9'))).toBe(429);
    expect(await login(site, '127.0.0.1', 'alice', PASSWORD, via('198.51.100.7, 203.0.113.9'))).toBe(429);
    expect(await login(site, '127.0.0.1', 'alice', PASSWORD, via('203.0.113.9, 198.51.100.7'))).toBe(303);
    // An IPv6 client is its /64: a new address in it is the same client.
    await fail(site, PER_NAME, '127.0.0.1', () => 'bob', via('2001:db8:1:2::1'));
    expect(await login(site, '127.0.0.1', 'bob', PASSWORD, via('2001:db8:1:2:ffff:ffff:ffff:fffe'))).toBe(429);
    expect(await login(site, '127.0.0.1', 'bob', PASSWORD, via('2001:db8:1:3::1'))).toBe(303);
  });

  it('without clientHeader a client cannot pick its own address by sending one', async () => {
    site = await startSite({ rows: [] });
    await fail(site, PER_NAME, '127.0.0.10', () => 'alice', {});
    for (let i = 0; i < 3; i++) expect(await login(site, '127.0.0.10', 'alice', PASSWORD, { 'X-Forwarded-For': `198.51.100.${i}`, 'X-Real-IP': `198.51.100.${i}` })).toBe(429);
  });

  /**
   * Every thread of libuv's pool held until `release()`: each opens a FIFO for reading, which waits for a writer.
   * Work queued behind them (an async scrypt) waits too, for as long as the test says, whatever the machine's speed.
   */
  async function holdThreadPool(dir: string): Promise<() => Promise<void>> {
    const threads = Number(process.env.UV_THREADPOOL_SIZE) || 4;
    const fifos = Array.from({ length: threads }, (_, i) => join(dir, `hold-${i}`));
    for (const f of fifos) expect(spawnSync('mkfifo', [f]).status).toBe(0);
    const held = fifos.map((f) => open(f, 'r'));
    return async () => {
      for (const f of fifos) {
        // A writer that does not wait: the reader is there (its open runs on a pool thread), or it is tried again.
        for (;;) {
          try {
            closeSync(openSync(f, constants.O_WRONLY | constants.O_NONBLOCK));
            break;
          } catch (err) {
            if ((err as NodeJS.ErrnoException).code !== 'ENXIO') throw err;
            await new Promise((r) => setImmediate(r));
          }
        }
      }
      for (const h of held) await (await h).close();
    };
  }

  it('a sign-in being checked holds up no other request: the page answers while the password hash waits', async () => {
    const usersFile = join(process.env.TMPDIR ?? '/tmp', `mw-limits-slow-${process.pid}-${Date.now()}`);
    writeFileSync(usersFile, `${hashPasswordLine('frank', 'frank-secret-1')}\n`);
    site = await startSite({ rows: [], review: { auth: { mode: 'users', usersFile } } });
    const t = linkToken('agent', NOW);
    const opened = await send(site, '127.0.0.2', `/open?t=${t}`, {});
    const csrf = /name="csrf" value="([^"]*)"/.exec(opened.text)?.[1] ?? '';
    const body = new URLSearchParams({ t, csrf, user: 'frank', password: 'frank-secret-1' }).toString();
    const release = await holdThreadPool(site.dir);
    let signedIn: number | undefined;
    const signIn = send(site, '127.0.0.2', '/login', { 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(Buffer.byteLength(body)), cookie: opened.cookie! }, body)
      .then((r) => (signedIn = r.status));
    try {
      // Another person's request, sent after the sign-in: answered while the sign-in still waits for its hash.
      expect((await send(site, '127.0.0.3', `/open?t=${t}`, {})).status).toBe(200);
      expect((await send(site, '127.0.0.3', '/', {})).status).toBe(404);
      expect(signedIn).toBeUndefined();
    } finally {
      await release();
    }
    expect(await signIn).toBe(303);
  });

  it('tries sent all at once, each hashed off the server\'s thread, meet the brake as tries one after another do', async () => {
    const usersFile = join(process.env.TMPDIR ?? '/tmp', `mw-limits-burst-${process.pid}-${Date.now()}`);
    writeFileSync(usersFile, `${hashPasswordLine('frank', 'frank-secret-1')}\n`);
    site = await startSite({ rows: [], review: { auth: { mode: 'users', usersFile } } });
    const statuses = await Promise.all(Array.from({ length: PER_NAME + 5 }, (_, i) => login(site, '127.0.0.4', 'frank', `guess ${i}`)));
    expect(statuses.filter((s) => s === 401)).toHaveLength(PER_NAME);
    expect(statuses.filter((s) => s === 429)).toHaveLength(5);
    expect(await login(site, '127.0.0.4', 'frank', 'frank-secret-1')).toBe(429);
    // From elsewhere the right password signs in, and each right one is taken back from the counts at once.
    for (let i = 0; i < PER_NAME + 1; i++) expect(await login(site, '127.0.0.5', 'frank', 'frank-secret-1')).toBe(303);
  });
});

describe('clientKey', () => {
  it('is the IPv4 address (also IPv4-mapped) or the IPv6 /64', () => {
    expect(clientKey('127.0.0.2')).toBe('127.0.0.2');
    expect(clientKey('::ffff:127.0.0.2')).toBe('127.0.0.2');
    expect(clientKey('2001:db8:1:2:3:4:5:6')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:0DB8:0001:0002::1')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(clientKey('::1')).toBe('0:0:0:0::/64');
    expect(clientKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
  });

  it('keeps a bounded number of counts however many addresses fail', () => {
    const limits = new SignInLimits();
    for (let i = 0; i < SignInLimits.MAX_KEYS; i++) limits.fail(`10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, 'x', NOW);
    expect((limits as unknown as { failures: Map<string, unknown> }).failures.size).toBeLessThanOrEqual(SignInLimits.MAX_KEYS);
    // The newest are kept: the last address is still counted.
    for (let i = 1; i < PER_NAME; i++) limits.fail('10.0.39.15', 'x', NOW);
    expect(limits.blocked('10.0.39.15', 'x', NOW)).toBe(true);
  });
});
