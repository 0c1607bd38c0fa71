import { describe, expect, it } from 'vitest';
import { maskSecretsSync } from '../src/text/credentials.js';
import { fakeSecrets } from './helpers/hostile.js';

// Assembled from pieces, so that this file holds no token a secret scanner would report.
const rep = (s: string, n: number) => s.repeat(Math.ceil(n / s.length)).slice(0, n);
const cat = (...parts: string[]) => parts.join('');
const b = (n: number) => rep('Q7zR2mX9kL4pV8nW3tY6', n);

/**
 * One sample of every kind secretlint's recommended preset reports (its rules: aws, gcp, github, npm, slack,
 * basicauth, openai, anthropic, linear, sendgrid, shopify, 1password, privatekey, database-connection-string),
 * written as that rule's documentation shows it. The catalogue of src/text/credentials.ts is the one source of
 * truth; this is what it must cover at least.
 */
const PRESET_KINDS: { kind: string; text: string; secret: string }[] = [
  { kind: 'aws access key id', secret: cat('AKIA', 'QZ7R2MX9KL4PV8NW'), text: '' },
  { kind: 'aws secret access key', secret: rep('wK9sLmQ2xR7vT4nB8cZ1', 40), text: '' },
  { kind: 'gcp service account', secret: rep('MIIEvQIBADANBgkqhkiG9w0BAQEFAASC', 120), text: '' },
  { kind: 'github token', secret: cat('gh', 'o_', b(36)), text: '' },
  { kind: 'github fine-grained', secret: cat('github_', 'pat_', b(82)), text: '' },
  { kind: 'npm .npmrc', secret: rep('00000000-1111-2222-3333-444444444444', 36), text: '' },
  { kind: 'npm token', secret: cat('np', 'm_', b(36)), text: '' },
  { kind: 'slack token', secret: cat('xo', 'xp-', '1234567890-1234567890-', b(24)), text: '' },
  { kind: 'slack webhook', secret: cat('T0123ABCD/', 'B0123ABCD/', b(24)), text: '' },
  { kind: 'basic auth url', secret: 'Basic4uthPw', text: '' },
  { kind: 'openai', secret: cat('sk-', b(20), 'T3Blbk', 'FJ', b(20)), text: '' },
  { kind: 'anthropic', secret: cat('sk-', 'ant-api03-', b(93), 'AA'), text: '' },
  { kind: 'linear', secret: cat('lin_', 'api_', b(40)), text: '' },
  { kind: 'sendgrid', secret: cat('S', 'G.', b(22), '.', b(43)), text: '' },
  { kind: 'shopify', secret: cat('shp', 'ss_', rep('a1b2c3d4e5f6', 32)), text: '' },
  { kind: '1password service account', secret: cat('op', 's_', 'eyJ', rep('zaWduSW5BZGRyZXNzIjoibXkuMXBhc3N3b3JkLmNvbSIs', 200)), text: '' },
  { kind: 'openssh private key', secret: rep('b3BlbnNzaC1rZXktdjEAAAAABG5vbmU', 120), text: '' },
  { kind: 'mongodb', secret: 'M0ngoPassw0rd', text: '' },
  { kind: 'mysql', secret: 'MySq1Passw0rd', text: '' },
  { kind: 'jdbc mysql', secret: 'JdbcPassw0rd9', text: '' },
  { kind: 'postgres', secret: 'P0stgresPassw0rd', text: '' },
];
const contexts: Record<string, (s: string) => string> = {
  'aws access key id': (s) => `aws_access_key_id = ${s}`,
  'aws secret access key': (s) => `aws_secret_access_key = ${s}`,
  'gcp service account': (s) => JSON.stringify({ type: 'service_account', project_id: 'p', private_key_id: 'abc', private_key: `${cat('-----BEGIN ', 'PRIVATE KEY-----')}\n${s}\n${cat('-----END ', 'PRIVATE KEY-----')}\n` }),
  'github token': (s) => `GITHUB_TOKEN=${s}`,
  'github fine-grained': (s) => `token ${s}`,
  'npm .npmrc': (s) => `//registry.npmjs.org/:_authToken=${s}`,
  'npm token': (s) => `publish with ${s}`,
  'slack token': (s) => `SLACK ${s}`,
  'slack webhook': (s) => `https://hooks.slack.com/services/${s}`,
  'basic auth url': (s) => `git clone https://deploy:${s}@git.example.org/app.git`,
  openai: (s) => `OPENAI_API_KEY ${s}`,
  anthropic: (s) => `key ${s}`,
  linear: (s) => `linear ${s}`,
  sendgrid: (s) => `mail via ${s}`,
  shopify: (s) => `shop ${s}`,
  '1password service account': (s) => `OP_SERVICE_ACCOUNT_TOKEN ${s}`,
  'openssh private key': (s) => `${cat('-----BEGIN ', 'OPENSSH PRIVATE KEY-----')}\n${s}\n${cat('-----END ', 'OPENSSH PRIVATE KEY-----')}`,
  mongodb: (s) => `mongodb+srv://app:${s}@cluster0.example.net/db?retryWrites=true`,
  mysql: (s) => `mysql://root:${s}@db.internal:3306/app`,
  'jdbc mysql': (s) => `jdbc:mysql://db.internal:3306/app?user=root&password=${s}`,
  postgres: (s) => `postgresql://app:${s}@db.internal/app?sslmode=require`,
};
for (const k of PRESET_KINDS) k.text = contexts[k.kind]!(k.secret);

/** The part of a secret no mask may show: all but a public prefix, as 12 characters from its middle. */
const middle = (secret: string) => secret.slice(Math.floor(secret.length / 2) - 6, Math.floor(secret.length / 2) + 6);

describe('the credential catalogue (one source of truth)', () => {
  it.each(PRESET_KINDS.map((k) => [k.kind, k] as const))('%s: masked', (_, { text, secret }) => {
    const shown = maskSecretsSync(text);
    expect(shown).toContain('[masked]');
    expect(shown).not.toContain(middle(secret));
    expect(shown).not.toContain(secret.slice(-8));
  });

  it('the hostile corpus too, and ordinary words are left alone', () => {
    for (const s of fakeSecrets()) expect(maskSecretsSync(s.text), s.form).not.toContain(middle(s.secret));
    for (const text of ['prefers pnpm', 'the secretary: Jane', 'tokens: 5', 'risk-assessment-framework', 'ops_manual.pdf is in the wiki']) {
      expect(maskSecretsSync(text), text).toBe(text);
    }
  });
});
