/**
 * Generated hostile text for the digest and the CLI: links hidden by characters that render as nothing, by
 * look-alike separators, and credentials of every common form. Built here so no real-looking secret sits verbatim
 * in the repository for a scanner to trip on.
 */

/** Every default-ignorable code point and every format character (Cf) that Node's Unicode data knows. */
export function hiddenCodePoints(): number[] {
  const re = /[\p{Default_Ignorable_Code_Point}\p{Cf}]/u;
  const out: number[] = [];
  for (let c = 0; c <= 0x10ffff; c++) if ((c < 0xd800 || c > 0xdfff) && re.test(String.fromCodePoint(c))) out.push(c);
  return out;
}

/** Link shapes with `{X}` where a hidden character goes: schemes, bare hosts, `www.`, e-mails, IPs, mentions. */
export const LINK_FORMS = [
  'https://ev{X}il.com/login', 'evil{X}.com/login', 'evil.{X}com', 'ev{X}il.com', 'www.{X}evil.com', 'www{X}.evil.com',
  'boss@corp{X}.com', 'boss{X}@corp.com', 'http://10.0.0{X}.1/x', '10{X}.0.0.1', '//evil{X}.com', '//localhost{X}:8080/x',
  'http://local{X}host/x', 'mailto:a{X}@evil.com', '@atta{X}cker', 'git://files{X}.example/x', 'xn--80ak6aa92e{X}.com',
  'пример{X}.рф', 'evil{X}.onion', 'login.ex{X}ample.co.uk', 'https{X}://evil.com', 'h{X}ttp://evil.com', 'HTTPS://EVIL{X}.COM',
];

/** Separators that browsers, IDNA or linkifiers read as `.`, `@`, `:` or `/`. */
export const CONFUSABLE_LINKS = [
  'evil\uFF0Ecom', 'evil\u3002com', 'evil\uFF61com', 'evil\uFE52com', 'evil\u2024com', 'boss\uFF20corp.com', 'boss\uFE6Bcorp.com',
  'https\uFF1A\uFF0F\uFF0Fevil.com', '\uFF45\uFF56\uFF49\uFF4C\uFF0E\uFF43\uFF4F\uFF4D', 'www\uFF0Eevil\uFF0Ecom', '\u24D4\u24E5\u24D8\u24DB.com',
  '\uFF11\uFF10\uFF0E\uFF10\uFF0E\uFF10\uFF0E\uFF11', 'xn--e1afmkfd.xn--p1ai', 'evil.xn--p1ai',
];

/** Each form with each hidden code point (or a sample of them) in it. */
export function hiddenLinkVariants(codePoints: number[], forms = LINK_FORMS): string[] {
  const out: string[] = [];
  for (const form of forms) for (const c of codePoints) out.push(form.replace('{X}', String.fromCodePoint(c)));
  return out;
}

const rep = (s: string, n: number) => s.repeat(Math.ceil(n / s.length)).slice(0, n);
const cat = (...parts: string[]) => parts.join('');

/**
 * Fake credentials of the common forms, each with the part that must never be shown (`secret`). Assembled from
 * pieces so that the source holds no token a secret scanner would report.
 */
export function fakeSecrets(): { form: string; text: string; secret: string }[] {
  const b = (n: number) => rep('Q7zR2mX9kL4pV8nW3tY6', n);
  const mk = (form: string, secret: string, wrap = (s: string) => s) => ({ form, text: wrap(secret), secret });
  const awsSecret = rep('wK9sLmQ2xR7vT4nB8cZ1', 40);
  const jwt = cat('eyJ', 'hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9', '.', 'eyJ', 'zdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ', '.', 'SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c');
  const pem = cat('-----BEGIN ', 'RSA PRIVATE KEY-----\n', rep('MIIEowIBAAKCAQEA7Vq', 64), '\n', rep('x9Lm2Kq8Zr', 64), '\n-----END ', 'RSA PRIVATE KEY-----');
  const pgp = cat('-----BEGIN PGP ', 'PRIVATE KEY BLOCK-----\n\n', rep('lQOYBGNpY2V4ZXJ', 64), '\n=Ab3x\n-----END PGP ', 'PRIVATE KEY BLOCK-----');
  return [
    mk('aws secret', awsSecret, (s) => `aws_secret_access_key=${s}`),
    mk('aws secret spaced', awsSecret, (s) => `AWS_SECRET_ACCESS_KEY = "${s}"`),
    mk('aws key id', cat('AKIA', 'Z7Q2M4X8K6R3T5V9'), (s) => `use ${s} for the bucket`),
    mk('jwt', jwt, (s) => `session ${s} works`),
    mk('bearer', b(32), (s) => `Authorization: Bearer ${s}`),
    mk('basic auth header', 'dXNlcjpodW50ZXIyaHVudGVyMg==', (s) => `Authorization: Basic ${s}`),
    mk('pem', pem.slice(32, 200), () => `key: ${pem}`),
    mk('pgp', pgp.slice(40, 200), () => `${pgp}`),
    mk('postgres url', 'Pg5ecretPassw0rd', (s) => `db at postgres://app:${s}@db.internal:5432/app`),
    mk('https userinfo', 'Htt9PassW0rdX', (s) => `fetch https://deploy:${s}@git.example.org/repo.git`),
    mk('redis url', 'R3disS3cretPw', (s) => `redis://:${s}@cache:6379/0`),
    mk('api_key param', b(24), (s) => `GET https://api.example.com/v1/x?api_key=${s}&page=2`),
    mk('token param', b(28), (s) => `callback /hook?user=1&token=${s}`),
    mk('password assignment', 'Tr0ub4dor&3xyz', (s) => `the db password=${s} since monday`),
    mk('password colon', 'correct-horse-battery', (s) => `password: "${s}"`),
    mk('github classic', cat('ghp_', b(36)), (s) => `deploy token ${s} works`),
    mk('github fine-grained', cat('github_pat_', b(22), '_', b(59)), (s) => `pat ${s}`),
    mk('gitlab', cat('glpat-', b(20)), (s) => `gitlab ${s}`),
    mk('slack bot', cat('xox', 'b-', '123456789012-1234567890123-', b(24)), (s) => `slack ${s}`),
    mk('slack webhook', cat('hooks.slack.com/services/', 'T0123ABCD/', 'B0123ABCD/', b(24)), (s) => `post to https://${s}`),
    mk('google api key', cat('AIza', 'Sy', b(33)), (s) => `maps key ${s}`),
    mk('openai', cat('sk-', 'proj-', b(48)), (s) => `OPENAI ${s}`),
    mk('stripe', cat('sk_', 'live_', b(24)), (s) => `stripe ${s}`),
    mk('npm', cat('npm_', b(36)), (s) => `//registry.npmjs.org/:_authToken=${s}`),
    mk('age identity', cat('AGE-SECRET-KEY-', '1', rep('QZ7R2MX9KL4PV8NW3TY6', 58)), (s) => `identity ${s}`),
    mk('pypi', cat('pypi-', 'AgEIcHlwaS5vcmc', b(60)), (s) => `twine token ${s}`),
    mk('vault', cat('hvs.', b(90)), (s) => `VAULT ${s}`),
    mk('digitalocean', cat('dop_', 'v1_', rep('a3f9c2e1b7d4', 64)), (s) => `do ${s}`),
    mk('google oauth client secret', cat('GOC', 'SPX-', b(28)), (s) => `client ${s}`),
    mk('telegram bot', cat('123456789', ':AA', b(33)), (s) => `bot ${s}`),
    mk('shopify', cat('shp', 'at_', rep('a1b2c3d4e5f6', 32)), (s) => `shop ${s}`),
    mk('linear', cat('lin_', 'api_', b(40)), (s) => `linear ${s}`),
    mk('groq', cat('gsk_', b(52)), (s) => `groq ${s}`),
    mk('userinfo without scheme', 'Hunter2SecretPw', (s) => `connect admin:${s}@db.internal:5432`),
    mk('curl -u', 'Hunter7SecretPw', (s) => `ran curl -u admin:${s} https://api.example.com`),
    mk('pass=', 'Sw0rdfishPw', (s) => `login pass=${s}`),
    mk('passphrase:', 'open_sesame_long_phrase', (s) => `passphrase: ${s}`),
    mk('cookie', cat('session=', b(32)), (s) => `Cookie: ${s}; theme=dark`),
    mk('bearer url-encoded', b(32), (s) => `header Authorization%3A%20Bearer%20${s}`),
    mk('putty key', rep('AAAAgQC7x9Lm2Kq8Zr', 40), (s) => `PuTTY-User-Key-File-3: ssh-rsa\nEncryption: none\nPrivate-Lines: 1\n${s}\nPrivate-MAC: 0a1b2c`),
  ];
}

/**
 * Ways an agent's text hides a secret from a pattern that finds it plain: glued to a word before or after it,
 * split by a character that renders as nothing, spelled in fullwidth letters. Each is applied to the secret inside
 * its context (`fullwidth` to the whole text).
 */
export const DISGUISES: { name: string; apply: (text: string, secret: string) => string }[] = [
  { name: 'glued after a word', apply: (t, s) => t.replace(s, `token_${s}`) },
  { name: 'glued after a letter', apply: (t, s) => t.replace(s, `x${s}`) },
  { name: 'glued after a digit', apply: (t, s) => t.replace(s, `1${s}`) },
  { name: 'glued before a word', apply: (t, s) => t.replace(s, `${s}_tail`) },
  ...[0x200b, 0x2060, 0xad, 0x200d, 0xfeff, 0x180e, 0xe0041].flatMap((c) => [
    { name: `U+${c.toString(16)} after two characters`, apply: (t: string, s: string) => t.replace(s, s.slice(0, 2) + String.fromCodePoint(c) + s.slice(2)) },
    { name: `U+${c.toString(16)} in the middle`, apply: (t: string, s: string) => t.replace(s, s.slice(0, s.length >> 1) + String.fromCodePoint(c) + s.slice(s.length >> 1)) },
  ]),
  { name: 'fullwidth', apply: (t) => [...t].map((ch) => (ch >= '!' && ch <= '~' ? String.fromCodePoint(ch.codePointAt(0)! + 0xfee0) : ch)).join('') },
];

/** What a reader sees of a shown text: compatibility forms folded, hidden characters and their � markers gone. */
export function asRead(text: string): string {
  return text.normalize('NFKC').replace(/[\p{Default_Ignorable_Code_Point}\p{Cf}\uFFFD]/gu, '');
}

/** The characters of a secret that must not appear: all of it but a public prefix a mask may keep. */
export function secretCore(secret: string): string {
  const m = /^(?:github_pat_|gh[pousr]_|glpat-|xox[a-z]-|AKIA|AIza|sk-proj-|sk_live_|npm_|eyJ)/.exec(secret);
  const core = m ? secret.slice(m[0].length) : secret;
  return core.slice(0, 16);
}
