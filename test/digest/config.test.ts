import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { tempDir } from '../helpers/store.js';
import { NOW, HOUR, at, world, runDigestJob, stateRows } from './fixtures.js';
import { validateConfig, type Config } from '../../src/config/config.js';
import { WardenError } from '../../src/core/errors.js';

let smtp: TestSmtp;
let tmp: { dir: string; cleanup: () => void };

beforeEach(async () => {
  smtp = await startSmtp({ auth: { user: 'warden', pass: 'right' } });
  tmp = tempDir('mw-digest-config-');
});
afterEach(async () => {
  await smtp.close();
  tmp.cleanup();
});

async function failure(p: Promise<unknown>): Promise<WardenError> {
  const err = await p.then(() => null, (e: unknown) => e);
  expect(err).toBeInstanceOf(WardenError);
  return err as WardenError;
}

const configWith = (base: Config, patch: { smtp?: unknown; digest?: Record<string, unknown> }): Config =>
  ({ ...base, ...(('smtp' in patch) ? { smtp: patch.smtp } : {}), digest: { ...base.digest, ...(patch.digest ?? {}) } }) as Config;

describe('bad SMTP config: one clear error at start, naming the field', () => {
  it.each([
    ['no smtp section', { smtp: undefined }, /^smtp: not configured/],
    ['user without password', { smtp: { host: '127.0.0.1', port: 2525, secure: false, timeoutMs: 5000, user: 'warden' } }, /^smtp\.password: required when smtp\.user is set/],
    ['password without user', { smtp: { host: '127.0.0.1', port: 2525, secure: false, timeoutMs: 5000, password: 'x' } }, /^smtp\.user: required/],
    ['465 without TLS', { smtp: { host: '127.0.0.1', port: 465, secure: false, timeoutMs: 5000 } }, /^smtp\.secure: port 465/],
    ['host with a space', { smtp: { host: 'smtp example', port: 25, secure: false, timeoutMs: 5000 } }, /^smtp\.host: /],
    ['no recipients', { digest: { to: [] } }, /^digest\.to: no recipients/],
  ])('%s', async (_, patch, message) => {
    const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(NOW - HOUR) }] }, smtp);
    const err = await failure(runDigestJob(configWith(w.config, patch), NOW));
    expect(err.kind).toBe('config');
    expect(err.transient).toBe(false);
    expect(err.message.replace(/^digest: /, '')).toMatch(message);
    expect(err.message).not.toContain('\n');
    // Checked before anything was claimed or sent.
    expect(stateRows(w.config)).toEqual([]);
    expect(smtp.attempts).toBe(0);
  });

  it('no store configured, or an unknown one asked for, is refused before anything is claimed', async () => {
    const w = world(tmp.dir, {}, smtp);
    expect((await failure(runDigestJob(w.config, NOW))).message).toMatch(/^digest: stores: none configured/);
    const w2 = world(tmp.dir, { agent: [] }, smtp);
    expect((await failure(runDigestJob(w2.config, NOW, { stores: ['nope'] }))).message).toBe('digest: no store named "nope" in config (stores: agent)');
    expect(stateRows(w2.config)).toEqual([]);
  });

  it('a time zone that does not exist names its field', async () => {
    // Refused when the config is read, before any job runs.
    expect(() => world(tmp.dir, { agent: [] }, smtp, {}, { worker: { timezone: 'Mars/Olympus' } })).toThrow(/^config: worker\.timezone: not a time zone/);
    expect(smtp.attempts).toBe(0);
  });

  it.each([
    ['a port that is not a number', { smtp: { host: 'h', port: 'abc' } }, /^config: smtp\.port: /],
    ['a missing host', { smtp: { port: 25 } }, /^config: smtp\.host: /],
    ['an unknown smtp field', { smtp: { host: 'h', pasword: 'x' } }, /^config: smtp: .*\(pasword\)/],
    ['a recipient that is not an address', { digest: { to: ['owner@example.org', 'not an address'] } }, /^config: digest\.to\.1: an email address/],
    ['a look-twice pattern that is not a regex', { digest: { lookTwice: { sources: [{ pattern: '(unclosed', label: 'x' }] } } }, /^config: digest\.lookTwice\.sources\.0\.pattern: not a valid regular expression/],
  ])('%s is refused when the config is loaded', (_, raw, message) => {
    expect(() => validateConfig(raw)).toThrow(message);
  });

  it('a login the server refuses is a config error naming smtp.user/smtp.password, not retried', async () => {
    const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(NOW - HOUR) }] }, smtp);
    // this server offers no STARTTLS: the config says the login may go in clear text
    const wrong = configWith(w.config, { smtp: { ...smtp.config(), user: 'warden', password: 'wrong', allowPlaintextAuth: true } });
    const err = await failure(runDigestJob(wrong, NOW));
    expect(err.kind).toBe('config');
    expect(err.message).toMatch(/smtp\.user\/smtp\.password: send digest via 127\.0\.0\.1:\d+: the server refused the login/);
    expect(err.message).not.toContain('wrong');
    expect(stateRows(w.config)[0]!.status).toBe('failed');
    const right = configWith(w.config, { smtp: { ...smtp.config(), user: 'warden', password: 'right', allowPlaintextAuth: true } });
    expect((await runDigestJob(right, NOW)).deliveries[0]!.status).toBe('sent');
    expect(smtp.received).toHaveLength(1);
  });
});

describe('SMTP credentials never travel in clear text unless the config says so', () => {
  let tmp: ReturnType<typeof tempDir>;
  beforeEach(() => (tmp = tempDir()));
  afterEach(() => tmp.cleanup());

  it('a server that offers no STARTTLS is not sent the password (secure: false): a config error naming smtp.allowPlaintextAuth', async () => {
    const plain = await startSmtp({ auth: { user: 'warden', pass: 'Pl4in@text:pw' } });
    try {
      const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(NOW - HOUR) }] }, plain);
      const cfg = configWith(w.config, { smtp: { ...plain.config(), user: 'warden', password: 'Pl4in@text:pw' } });
      const err = await failure(runDigestJob(cfg, NOW));
      expect(err.kind).toBe('config');
      expect(err.message).toMatch(/smtp\.allowPlaintextAuth: send digest via 127\.0\.0\.1:\d+: the server offers no STARTTLS/);
      expect(err.message).not.toContain('Pl4in');
      expect(plain.logins).toBe(0);
      expect(plain.attempts).toBe(0);
      expect(stateRows(w.config)[0]!.status).toBe('failed');
      // said in the config, in the setting named for it: sent, logged in
      const allowed = configWith(w.config, { smtp: { ...plain.config(), user: 'warden', password: 'Pl4in@text:pw', allowPlaintextAuth: true } });
      expect((await runDigestJob(allowed, NOW)).deliveries[0]!.status).toBe('sent');
      expect(plain.logins).toBe(1);
      expect(plain.received).toHaveLength(1);
    } finally {
      await plain.close();
    }
  });

  it('credentials configured for a server that offers no login: an error naming them, nothing sent without them', async () => {
    const open = await startSmtp(); // no AUTH, no STARTTLS
    try {
      const w = world(tmp.dir, { agent: [{ id: 'm_1', created_at: at(NOW - HOUR) }] }, open);
      const cfg = configWith(w.config, { smtp: { ...open.config(), user: 'warden', password: 'N0auth@pw', allowPlaintextAuth: true } });
      const err = await failure(runDigestJob(cfg, NOW));
      expect(err.kind).toBe('config');
      expect(err.message).toMatch(/smtp\.user\/smtp\.password: send digest via 127\.0\.0\.1:\d+: the server offers no login \(AUTH\)/);
      expect(err.message).not.toContain('N0auth');
      expect(open.attempts).toBe(0);
      expect(open.received).toHaveLength(0);
      // without credentials the same server takes the digest
      expect((await runDigestJob(configWith(w.config, { smtp: open.config() }), NOW)).deliveries[0]!.status).toBe('sent');
      expect(open.received).toHaveLength(1);
    } finally {
      await open.close();
    }
  });
});
