import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { tempDir, type Row } from '../helpers/store.js';
import { linksIn, htmlToText } from '../helpers/linkify.js';
import { CONFUSABLE_LINKS, DISGUISES, LINK_FORMS, asRead, fakeSecrets, hiddenCodePoints, hiddenLinkVariants, secretCore } from '../helpers/hostile.js';
import { NOW, HOUR, DAY, at, world, runDigestJob, withState } from './fixtures.js';
import { html, plain } from '../../src/digest/untrusted.js';
import { maskDeep, maskSecretsSync } from '../../src/text/credentials.js';

let smtp: TestSmtp;
let tmp: { dir: string; cleanup: () => void };

beforeEach(async () => {
  smtp = await startSmtp();
  tmp = tempDir('mw-hostile-');
});
afterEach(async () => {
  vi.unstubAllEnvs();
  await smtp.close();
  tmp.cleanup();
});

const HIDDEN = hiddenCodePoints();
// Every hidden code point of the BMP and of the SMP (variation selectors, tags, musical format characters), and
// an even sample of the rest of plane 14, for every link form; all of them for two forms.
const SAMPLE = HIDDEN.filter((c, i) => c < 0xe0000 || c <= 0xe007f || i % 97 === 0);
const VARIANTS = [
  ...hiddenLinkVariants(HIDDEN, ['evil{X}.com/login', 'https://ev{X}il.com']),
  ...hiddenLinkVariants(SAMPLE, LINK_FORMS),
  ...CONFUSABLE_LINKS,
];

describe('links hidden by invisible and look-alike characters', () => {
  it('the generated set is hostile: without defanging, linkify-it links them', () => {
    expect(HIDDEN.length).toBeGreaterThan(4000);
    for (const form of LINK_FORMS) expect(linksIn(form.replace('{X}', '')), form).not.toEqual([]);
    // A soft hyphen, a variation selector, a tag character, the Mongolian vowel separator: still a live link.
    for (const c of [0xad, 0xfe0f, 0xe0041, 0x180e, 0x34f, 0x2060]) {
      expect(linksIn(`evil${String.fromCodePoint(c)}.com/login`), c.toString(16)).not.toEqual([]);
    }
    expect(CONFUSABLE_LINKS.filter((s) => linksIn(s).length > 0).length).toBeGreaterThan(3);
  });

  it('after plain(), linkify-it finds no link in any of them', () => {
    const linked = VARIANTS.map((v) => ({ v, out: plain(v) })).filter(({ out }) => linksIn(out).length > 0);
    expect(linked.slice(0, 5)).toEqual([]);
  });

  it('nothing in a sent digest links: text, HTML, and mailparser\'s textAsHtml, in every field', async () => {
    // Every hidden code point in one form, the sample in every form, the look-alikes: about 4,000 links.
    const sent = [...hiddenLinkVariants(HIDDEN, ['evil{X}.com/login']), ...hiddenLinkVariants(SAMPLE, LINK_FORMS).filter((_, i) => i % 3 === 0), ...CONFUSABLE_LINKS];
    const rows: Row[] = [];
    const per = 20;
    for (let i = 0; i * per < sent.length; i++) {
      const chunk = sent.slice(i * per, (i + 1) * per);
      rows.push({
        id: `h_${i}${i % 5 === 0 ? chunk[0] : ''}`,
        subject: chunk[1] ?? 'x',
        fact: chunk.join(' '),
        source: chunk[2] ?? 'x',
        created_at: at(NOW - HOUR - i * 1000),
      });
    }
    // The review batch shows old rows, their subject, fact and source; drift evidence and job errors too.
    rows.push({ id: 'old_1', subject: 'evil\u00AD.com', fact: 'see https://ev\u034Fil.com', source: 'www\u200B.evil.com', created_at: at(NOW - 400 * DAY), confirmed_at: at(NOW - 300 * DAY) });
    const w = world(tmp.dir, { agent: rows }, smtp, { maxRows: rows.length + 10 }, { smtp: smtp.config({ timeoutMs: 60_000 }) });
    withState(w.config, (db) => {
      db.prepare(`INSERT INTO job_runs (job, store, started_at, finished_at, outcome, result, error) VALUES (?, ?, ?, ?, ?, ?, ?)`)
        .run('snapshot', 'agent', at(NOW - HOUR), at(NOW - HOUR), 'failed', null, 'fetch http://10.0.0\u2063.1/x failed at evil\uFE0F.com');
      db.prepare(`INSERT INTO drift_verdicts (store, memory_id, verdict, verifier, evidence, checked_at, needs_person, resolved_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
        .run('agent', 'old_1', 'contradicted', 'repo', 'now points at boss@corp\u180E.com and //localhost\u00AD:8080/x', at(NOW - 2 * HOUR), 1, null);
    });
    await runDigestJob(w.config, NOW);
    expect(smtp.received).toHaveLength(1);
    const m = smtp.received[0]!;
    const text = String(m.parsed.text ?? '');
    const html = String(m.parsed.html || '');
    expect(linksIn(text)).toEqual([]);
    expect(linksIn(htmlToText(html))).toEqual([]);
    expect(html).not.toMatch(/<a\s|href=/i);
    expect(String(m.parsed.textAsHtml)).not.toMatch(/<a\s/i);
    // The variants are there, shown: hidden characters as �, links broken by [.], [://], [@].
    expect(text).toContain('evil\uFFFD[.]com/login');
    expect(text).toContain('hxxps[://]ev\uFFFDil[.]com');
    expect(html).toContain('now points at boss[@]corp\uFFFD[.]com');
  }, 240_000);
});

describe('links after punctuation an autolinker may read as a letter', () => {
  // linkify-it's Unicode tables (uc.micro) call some 230 characters letters that Node's call punctuation (U+10100,
  // U+1B4E …); other mail clients have tables of their own. Every non-ASCII punctuation character, before a dot.
  const punctuation: string[] = [];
  for (let c = 0x80; c <= 0x10ffff; c++) if ((c < 0xd800 || c > 0xdfff) && /\p{P}/u.test(String.fromCodePoint(c))) punctuation.push(String.fromCodePoint(c));
  const forms = (c: string) => [`evil${c}.com/login`, `login at a.b${c}.com/x`, `www.ev${c}il.com`, `mail boss@corp${c}.com`];

  it('the set is hostile: without defanging, linkify-it links some of them', () => {
    expect(punctuation.length).toBeGreaterThan(700);
    expect(punctuation.filter((c) => linksIn(`evil${c}.com/login`).length > 0).length).toBeGreaterThan(100);
  });

  it('after plain(), linkify-it finds no link in any of them, and the HTML part none either', () => {
    const linked = punctuation.flatMap(forms).filter((v) => linksIn(plain(v)).length > 0 || linksIn(htmlToText(html(v))).length > 0);
    expect(linked.slice(0, 5)).toEqual([]);
  });
});

describe('credentials in disguise', () => {
  it('each form glued to a word, split by a character that renders as nothing, or in fullwidth: masked', () => {
    const leaks: string[] = [];
    let tried = 0;
    for (const s of fakeSecrets()) {
      for (const d of DISGUISES) {
        const text = d.apply(s.text, s.secret);
        if (text === s.text) continue; // a form whose text holds its secret otherwise (the PEM block)
        tried += 1;
        const core = secretCore(s.secret);
        for (const [how, out] of [['masked', plain(maskSecretsSync(text))], ['plain', plain(text)]] as const) {
          if (asRead(out).includes(core)) leaks.push(`${s.form} / ${d.name} / ${how}: ${out.slice(0, 100)}`);
        }
      }
    }
    expect(tried).toBeGreaterThan(600);
    expect(leaks).toEqual([]);
  });

  it('ordinary text is shown as written: nothing masked, hidden characters still marked', () => {
    for (const text of ['risk-assessment-framework for the team', 'bypass=true in tests', 'write to boss@corp.example', 'mailto:someone@example.org', 'pay\u202Eto the order', 'a\u200Bb']) {
      expect(maskSecretsSync(text), text).toBe(text);
    }
  });
});

describe('ids that hold a credential', () => {
  it('shown masked in the digest, in no review command; the rest of the rows keep their commands', async () => {
    const forms = fakeSecrets().filter((s) => /github|npm|shopify|linear|stripe|openai|aws key|google api|groq|age/.test(s.form));
    const rows: Row[] = [];
    const ids = forms.flatMap((s, i) => [s.secret, DISGUISES[i % DISGUISES.length]!.apply(s.secret, s.secret)]);
    ids.forEach((id, i) => {
      rows.push({ id, subject: 'creds', fact: 'an agent used a token as the id', source: 'tool', created_at: at(NOW - 400 * DAY), confirmed_at: at(NOW - (300 - i) * DAY) });
      rows.push({ id: `${id}-new`, subject: 'creds', fact: 'a new row with such an id', source: 'tool', created_at: at(NOW - HOUR - i * 1000) });
    });
    rows.push({ id: 'm_plain', subject: 'user', fact: 'prefers pnpm', source: 'message', created_at: at(NOW - 500 * DAY), confirmed_at: at(NOW - 400 * DAY) });
    const w = world(tmp.dir, { agent: rows }, smtp, {}, { review: { batch: ids.length + 1 } });
    vi.stubEnv('MEMORY_WARDEN_STATE', w.config.stateDb); // the state db --db alone uses: the commands name the store by --db
    await runDigestJob(w.config, NOW);
    const m = smtp.received[0]!;
    const text = String(m.parsed.text ?? '');
    const htmlText = htmlToText(String(m.parsed.html || ''));
    for (const part of [text, htmlText, m.raw.replace(/=\r?\n/g, '')]) {
      for (const s of forms) expect(asRead(part), s.form).not.toContain(secretCore(s.secret));
    }
    expect(text.match(/looks like a credential: not printed here/g)).toHaveLength(ids.length);
    expect(text).toMatch(/\$ memory-warden review confirm m_plain --db /);
    expect(htmlText).toMatch(/memory-warden review confirm m_plain --db /);
  });
});

describe('credentials never reach a digest', () => {
  it('masking with a memo (what the digest masks ahead while it waits) gives what masking afresh gives', async () => {
    const texts = fakeSecrets().map((s) => s.text);
    const model = { id: texts[0], rows: texts.map((t, i) => ({ id: t, fact: `note ${t}`, source: t, reasons: ['same', 'same'], n: i })) };
    const memo = new Map<string, Promise<string>>();
    const ahead = await maskDeep(model.rows.slice(0, 5), new Set(['id']), memo); // part first, as the digest does
    const fresh = await maskDeep(model, new Set(['id']));
    expect(await maskDeep(model, new Set(['id']), memo)).toEqual(fresh);
    expect(ahead).toEqual(fresh.rows.slice(0, 5));
    expect(fresh.id).toBe(texts[0]); // kept keys are not masked
    for (const row of fresh.rows) expect(row.fact).not.toContain(secretCore(fakeSecrets()[row.n]!.secret));
    expect(memo.size).toBeGreaterThan(texts.length); // every distinct string once: facts, sources, the reason
  });

  it('each form, in fact, subject, source, review batch, drift evidence and job errors: masked in text, HTML and raw MIME', async () => {
    const secrets = fakeSecrets();
    for (const s of secrets) expect(maskSecretsSync(s.text), s.form).not.toContain(secretCore(s.secret));
    const rows: Row[] = [];
    secrets.forEach((s, i) => {
      rows.push({ id: `f_${i}`, subject: 'creds', fact: `note: ${s.text} (${s.form})`, source: 'user message', created_at: at(NOW - HOUR - i * 1000) });
      rows.push({ id: `s_${i}`, subject: s.text, fact: 'subject holds it', source: 'user message', created_at: at(NOW - 2 * HOUR - i * 1000) });
      rows.push({ id: `o_${i}`, subject: 'src', fact: 'source holds it', source: `tool output ${s.text}`, created_at: at(NOW - 3 * HOUR - i * 1000) });
      rows.push({ id: `r_${i}`, subject: s.text, fact: `old ${s.text}`, source: s.text, created_at: at(NOW - 400 * DAY), confirmed_at: at(NOW - (300 - i) * DAY) });
    });
    const w = world(tmp.dir, { agent: rows }, smtp, {}, { review: { batch: secrets.length }, smtp: smtp.config({ timeoutMs: 60_000 }) });
    withState(w.config, (db) => {
      const run = db.prepare(`INSERT INTO job_runs (job, store, started_at, finished_at, outcome, result, error) VALUES (?, ?, ?, ?, ?, ?, ?)`);
      const verdict = db.prepare(`INSERT INTO drift_verdicts (store, memory_id, verdict, verifier, evidence, checked_at, needs_person, resolved_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`);
      secrets.forEach((s, i) => {
        run.run('snapshot', i % 2 ? 'agent' : null, at(NOW - HOUR), at(NOW - HOUR), 'failed', null, `request failed: ${s.text}`);
        verdict.run('agent', `r_${i}`, 'changed', 'http', JSON.stringify({ reason: `page now says ${s.text}`, replacement: { fact: s.text } }), at(NOW - 2 * HOUR), 1, null);
      });
    });
    await runDigestJob(w.config, NOW);
    expect(smtp.received).toHaveLength(1);
    const m = smtp.received[0]!;
    const text = String(m.parsed.text ?? '');
    const html = String(m.parsed.html || '');
    const raw = m.raw.replace(/=\r?\n/g, '');
    expect(text).toContain('[masked]');
    for (const s of secrets) {
      const core = secretCore(s.secret);
      expect(text, s.form).not.toContain(core);
      expect(html, s.form).not.toContain(core);
      expect(raw, s.form).not.toContain(core);
      expect(htmlToText(html), s.form).not.toContain(core);
    }
  }, 240_000);
});
