import { describe, expect, it } from 'vitest';
import { Writable } from 'node:stream';
import { redactSecrets, redactText, rememberSecret } from '../src/text/secrets.js';
import { createLogger } from '../src/log/logger.js';
import { loadConfig } from '../src/config/config.js';
import { compileRules } from '../src/verifiers/rules.js';

/** The redactor every record and output passes: each form a value from the environment may take on its way. */
describe('secrets from the environment', () => {
  const token = 's3cr:t/tok+en=ü&x y"z';
  rememberSecret('UNIT_TOKEN', token);

  it('redacts the value as written, percent-encoded (either hex case), form-encoded and JSON-escaped', () => {
    const forms = [
      token,
      encodeURIComponent(token),
      encodeURIComponent(token).replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase()), // lower-case hex
      encodeURI(token),
      new URL(`http://h/p?q=${token}`).search.slice(3),
      new URL(`http://h/${token}`).pathname.slice(1),
      encodeURIComponent(token).replace(/%20/g, '+'),
      JSON.stringify(token).slice(1, -1),
    ];
    for (const f of forms) {
      const out = redactText(`before ${f} after`);
      expect(out, f).toBe('before ${UNIT_TOKEN} after');
    }
  });

  it('redacts its base64 wherever it sits in the encoded text (Basic auth of any user)', () => {
    for (const user of ['', 'a', 'ab', 'abc', 'svc-account']) {
      const header = `Basic ${Buffer.from(`${user}:${token}`).toString('base64')}`;
      const out = redactText(header);
      expect(out, user).toContain('${UNIT_TOKEN}');
      // what is left cannot be decoded back to the token
      expect(Buffer.from(out.replace('Basic ', '').replace(/\$\{UNIT_TOKEN\}/g, ''), 'base64').toString('latin1')).not.toContain('tok+en');
    }
    const url = Buffer.from(`x:${token}`).toString('base64url');
    expect(redactText(url)).toContain('${UNIT_TOKEN}');
  });

  it('redacts deep inside values, keys and errors, and leaves other values alone', () => {
    const err = new Error(`GET failed for ${encodeURIComponent(token)}`);
    const out = redactSecrets({ a: [{ [token]: `x${token}` }], n: 5, ok: true, err, nothing: null });
    expect(JSON.stringify(out)).not.toContain('tok+en');
    expect(out.n).toBe(5);
    expect(out.err.message).toBe('GET failed for ${UNIT_TOKEN}');
    expect(redactText('plain text stays')).toBe('plain text stays');
  });

  it('remembers what config and rules expand, short values excepted, and the logger writes none of it', () => {
    loadConfig({ overrides: { stores: { x: { db: '/tmp/${CFG_DB_DIR}/m.db' } } }, env: { CFG_DB_DIR: 'cfgDirSecret-99' } });
    compileRules({ rules: [{ match: { source: '^x$' }, use: 'http', with: { url: 'http://h/?k=${RULE_KEY}&p=${SHORT}' }, autoSupersede: false }] }, { RULE_KEY: 'ruleKeySecret-77', SHORT: '80' });
    expect(redactText('a cfgDirSecret-99 b ruleKeySecret-77 c 80')).toBe('a ${CFG_DB_DIR} b ${RULE_KEY} c 80');
    // expect and replacement are the text of a fact, not credentials: written to the store as they are
    compileRules({ rules: [{ match: { source: '^x$', fact: 'wantBranch' }, use: 'file', with: { path: 'p', expect: '${WANT_BRANCH}' }, replacement: 'deploys via ${NEW_BRANCH}', autoSupersede: true }] }, { WANT_BRANCH: 'wantBranch-1', NEW_BRANCH: 'newBranch-2' });
    expect(redactText('wantBranch-1 newBranch-2')).toBe('wantBranch-1 newBranch-2');
    const lines: string[] = [];
    const destination = new Writable({ write: (chunk, _e, done) => (lines.push(String(chunk)), done()) });
    const log = createLogger({ level: 'debug', destination }).child({ url: `http://h/?k=ruleKeySecret-77` });
    log.warn({ headers: { 'x-key': token }, err: new Error(`boom ${token}`) }, `reading ${encodeURIComponent(token)}`);
    const text = lines.join('');
    expect(text).toContain('${RULE_KEY}');
    expect(text).toContain('${UNIT_TOKEN}');
    for (const f of [token, encodeURIComponent(token), JSON.stringify(token).slice(1, -1), 'ruleKeySecret-77']) expect(text).not.toContain(f);
  });
});

describe('what counts as a secret from the environment', () => {
  it('a local file path in a field that names a file is not one (errors must name their file); a URL or a token is', () => {
    rememberSecret('SOME_DIR', '/var/lib/some-secret-looking-dir', true);
    rememberSecret('HOME_DIR', '~/.mem0/store', true);
    rememberSecret('SOME_URL', 'https://user:pw-9731@example.org/x');
    rememberSecret('SOME_TOKEN', 'tok-5521-abcdef');
    expect(redactText('open /var/lib/some-secret-looking-dir/state.db and ~/.mem0/store')).toBe('open /var/lib/some-secret-looking-dir/state.db and ~/.mem0/store');
    expect(redactText('GET https://user:pw-9731@example.org/x?t=tok-5521-abcdef')).toBe('GET ${SOME_URL}?t=${SOME_TOKEN}');
  });
});

describe('a value shaped like a path is a secret anywhere but a field that names a file', () => {
  it('a token that begins with / or ./ or ~/, in a rule URL, a header, SMTP, Redis: redacted', () => {
    const env = { TOK_SLASH: '/s3cr3tTokenValue9', TOK_DOT: './dotTokenValue-31', TOK_TILDE: '~/tildeToken-88', SMTP_SECRET: '/smtpPassw0rd-4', DIR_OF_DB: '/var/lib/warden-db-dir' };
    compileRules({ rules: [{ match: { source: '^x$' }, use: 'http', with: { url: 'http://h/p?key=${TOK_SLASH}&b=${TOK_DOT}', headers: { Authorization: 'Bearer ${TOK_TILDE}' } }, autoSupersede: false }] }, env);
    loadConfig({ overrides: { stores: { x: { db: '${DIR_OF_DB}/m.db' } }, smtp: { host: 'mail.example', password: '${SMTP_SECRET}' } }, env });
    for (const [name, value] of Object.entries(env).filter(([n]) => n !== 'DIR_OF_DB')) {
      expect(redactText(`GET http://h/p?key=${value} answered 404`), name).toBe(`GET http://h/p?key=\${${name}} answered 404`);
    }
    // The store's folder, from the environment into stores.x.db: named as it is in errors.
    expect(redactText('/var/lib/warden-db-dir/m.db: not a file')).toBe('/var/lib/warden-db-dir/m.db: not a file');
  });

  it('redacts it JSON-escaped as PHP writes it, hex-encoded either case, and a backslash read as a URL reads it', () => {
    rememberSecret('ENC_TOKEN', 'tok/Abc+123=zz-enc');
    rememberSecret('BACKSLASH_TOKEN', 'ab\\cd9876-url');
    const hex = Buffer.from('tok/Abc+123=zz-enc').toString('hex');
    for (const form of ['"Bearer tok\\/Abc+123=zz-enc"', hex, hex.toUpperCase(), new URL('http://h/ab\\cd9876-url').pathname]) {
      expect(redactText(`x ${form} y`), form).not.toMatch(/Abc\+123|cd9876|746f6b2f|746F6B2F/);
    }
  });
});
