import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { simpleParser } from 'mailparser';
import { defang, escapeHtml, headerText, html, maskSecrets, oneLine, plain, reviewCommands, shellWord } from '../../src/digest/untrusted.js';

/** mailparser's textAsHtml runs linkify-it with the full TLD list, fuzzy links, e-mails, IPs and @mentions: a real autolinker. */
async function autolinks(text: string): Promise<string[]> {
  const raw = `From: a@b.example\r\nTo: c@d.example\r\nSubject: t\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n${text}\r\n`;
  const parsed = await simpleParser(raw);
  return [...String(parsed.textAsHtml ?? '').matchAll(/<a [^>]*>/g)].map((m) => m[0]);
}

const LINKY = [
  'https://evil.example/login?next=/admin',
  'http://10.0.0.1:8080/x',
  'visit www.evil.com today',
  'mail boss@corp.com now',
  'see README.md and evil.co',
  'ping @attacker',
  'javascript:alert(1) or mailto:boss@corp.com',
  'git://files.example/x',
];

describe('defang', () => {
  it('leaves nothing a real autolinker turns into a link', async () => {
    for (const s of LINKY) {
      expect(await autolinks(s), `the sample itself is linked: ${s}`).not.toEqual([]);
      expect(await autolinks(defang(s)), defang(s)).toEqual([]);
    }
  });

  it('stays readable', () => {
    expect(defang('https://evil.example/x')).toBe('hxxps[://]evil[.]example/x');
    expect(defang('mailto:boss')).toBe('mailto[:]boss');
    // Browsers read an ideographic full stop in a host as a dot.
    expect(defang('evil\u3002com')).toBe('evil[.]com');
    expect(defang('prefers pnpm over npm; Node 20.1')).toBe('prefers pnpm over npm; Node 20.1');
  });

  it('a zero-width space is not enough (which is why [.] was chosen)', async () => {
    expect(await autolinks('www\u200B.evil.com')).not.toEqual([]);
  });
});

describe('untrusted text', () => {
  it('one line: CR/LF, ANSI escapes, bidi overrides and NUL become visible markers', () => {
    const s = oneLine('a\r\nBcc: x@y\n\u001b[2J\u202Egnp.exe\u0000');
    expect(s).not.toMatch(/[\r\n\u001b\u202E\u0000]/);
    expect(s).toContain('⏎');
  });

  it('headers: no control character at all, bounded', () => {
    const h = headerText('digest\r\nBcc: evil@attacker.example\u0007'.repeat(50));
    expect(h).not.toMatch(/[\u0000-\u001F\u007F]/);
    expect(h.length).toBeLessThanOrEqual(200);
  });

  it('HTML: escaped after defanging', () => {
    expect(html('<script>alert("x")</script> & <img src=x onerror=1>')).toBe('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img src=x onerror=1&gt;');
    expect(escapeHtml(`'"`)).toBe('&#39;&quot;');
    expect(plain('a\nb')).toBe('a ⏎ b');
  });
});

describe('review commands', () => {
  it('plain ids go bare, in the documented form', () => {
    expect(reviewCommands('m_0140', { flag: '--store', value: 'agent' })).toEqual({
      confirm: 'memory-warden review confirm m_0140 --store agent',
      supersede: "memory-warden review supersede m_0140 --fact 'NEW FACT' --source 'WHERE IT CAME FROM' --store agent",
    });
    expect(shellWord('2026-11-29:abc.1')).toBe('2026-11-29:abc.1');
  });

  it('a store path goes bare when plain and single-quoted otherwise, and bash reads it back exactly', () => {
    expect(reviewCommands('m_1', { flag: '--db', value: '/var/lib/agent/memory.db' }).confirm).toBe('memory-warden review confirm m_1 --db /var/lib/agent/memory.db');
    const path = "/srv/agent's memory/m.db";
    const { confirm } = reviewCommands('m_1', { flag: '--db', value: path });
    const word = confirm.slice('memory-warden review confirm m_1 --db '.length);
    const r = spawnSync('bash', ['--norc', '--noprofile', '-c', `printf '%s' ${word}`], { encoding: 'utf8' });
    expect(r.stdout).toBe(path);
  });

  const HOSTILE = [
    'm_1; rm -rf ~',
    "x'$(touch /tmp/pwned)'",
    'a`id`b',
    'line\nbreak',
    '--help',
    '-rf',
    'évil\u202Etxt.exe',
    'evil.com',
    'back\\slash"quote',
  ];

  it('hostile ids become one inert shell word after --, that bash reads back exactly', () => {
    for (const id of HOSTILE) {
      const { confirm } = reviewCommands(id, { flag: '--store', value: 'agent' });
      expect(confirm.startsWith('memory-warden review confirm --store agent -- ')).toBe(true);
      const word = shellWord(id);
      expect(word).toMatch(/^\$'[A-Za-z0-9_ \\-]*'$/);
      // What a person's shell would pass: printf prints the word back, and nothing else runs.
      const r = spawnSync('bash', ['--norc', '--noprofile', '-c', `printf '%s' ${word}`], { encoding: 'utf8' });
      expect(r.status).toBe(0);
      expect(r.stdout).toBe(id);
    }
  });
});

describe('maskSecrets (the generic rules every render applies)', () => {
  it('keeps at most a public prefix of anything that looks like a credential', () => {
    expect(maskSecrets('staging api_key: sk-live-abcdefghijklmnop')).toBe('staging api_key: sk-…[masked]');
    expect(maskSecrets('deploy token ghp_ABCDEFGHIJKLMNOPQRST1234 works')).toBe('deploy token ghp_…[masked] works');
    expect(maskSecrets('aws AKIAABCDEFGHIJKLMNOP here')).toBe('aws AKIA…[masked] here');
    expect(maskSecrets('db password = "hunter2hunter2"')).toBe('db password = "[masked]"');
    expect(maskSecrets('prefers pnpm over npm; tokens: 5; the secretary: Jane')).toBe('prefers pnpm over npm; tokens: 5; the secretary: Jane');
  });
});
