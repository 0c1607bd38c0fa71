/** Masking over the readings of a text: every planted form masked, tail included; ordinary facts unchanged. */
import { describe, expect, it } from 'vitest';
import { maskSecretsSync } from '../src/text/credentials.js';
import { plain } from '../src/digest/untrusted.js';
import { readings } from '../src/text/secret-readings.js';
import { asRead, fakeSecrets, secretCore } from './helpers/hostile.js';
import { BENIGN, ENCODINGS, leaksIn, plainSecrets, plantedSecrets, secretParts } from './helpers/secret-forms.js';

/** The leaks of one masking: a part of a secret in what is shown, or in any reading of it (an encoded tail). */
function leaks(mask: (text: string) => string, planted = plantedSecrets()): string[] {
  const out: string[] = [];
  for (const p of planted) {
    const shown = mask(p.text);
    if (leaksIn(shown, [p]).length > 0) out.push(`${p.kind}: ${JSON.stringify(shown.slice(0, 160))}`);
  }
  return out;
}

describe('credentials in every form', () => {
  it('the planted forms are hostile: each reads as its secret once undone, and the part masking must hide is there', () => {
    for (const p of plantedSecrets()) {
      const all = [p.text, ...readings(p.text).map((r) => r.text)];
      expect(all.some((t) => secretParts(p).every((part) => t.includes(part))), p.kind).toBe(true);
    }
    expect(ENCODINGS.length * plainSecrets().length).toBeGreaterThan(250);
  });

  it('the generic rules mask every form, tail included, in the raw text and in every reading of the result', () => {
    expect(leaks(maskSecretsSync)).toEqual([]);
  });

  it('the digest and page text (plain) shows none of them', () => {
    expect(leaks(plain)).toEqual([]);
  });

  it('the class around them: every credential form of the hostile corpus in every encoding, start and tail', () => {
    const out: string[] = [];
    for (const s of fakeSecrets()) {
      const parts = [secretCore(s.secret), s.secret.slice(-8)];
      for (const e of ENCODINGS) {
        const shown = maskSecretsSync(e.apply(s.text, s.secret));
        const views = [shown, ...readings(shown).map((r) => r.text)].map(asRead);
        if (parts.some((part) => views.some((v) => v.includes(part)))) out.push(`${s.form} / ${e.name}: ${JSON.stringify(shown.slice(0, 120))}`);
      }
    }
    expect(out).toEqual([]);
  });

  it('a secret split by a line break is masked whole, the public prefix kept, the text around it as written', () => {
    const [gh] = plainSecrets();
    const text = `before\n${gh!.secret.slice(0, 10)}\n${gh!.secret.slice(10)} after`;
    expect(maskSecretsSync(text)).toBe('before\nghp_…[masked] after');
    expect(maskSecretsSync('x password%3Dhunter2hunter2 y')).toBe('x password%3D[masked] y');
  });

  it('an encoded run that holds a secret is masked whole: no character of its tail is left', () => {
    const blob = Buffer.from('aws_secret_access_key=wK9sLmQ2xR7vT4nB8cZ1wK9s').toString('base64');
    expect(maskSecretsSync(`blob ${blob} end`)).toBe('blob [masked] end');
    const hex = Buffer.from('password=hunter2hunter2').toString('hex');
    expect(maskSecretsSync(`hex ${hex}`)).toBe('hex [masked]');
  });

  it('a long text (a whole page) is read in windows: a form anywhere in it, on a window\'s edge too, is masked', () => {
    const filler = 'the agent read this page and kept it. '.repeat(1000);
    const planted = plantedSecrets().filter((_, i) => i % 7 === 0);
    for (const at of [0, 12_000, 16_300, 16_384, 28_600, filler.length]) {
      const leaks = planted.filter((p) => {
        const shown = maskSecretsSync(`${filler.slice(0, at)} ${p.text} ${filler.slice(at)}`);
        // The filler holds nothing to mask: what was planted at `at` is shown there, masked or not.
        expect(shown.slice(0, at)).toBe(filler.slice(0, at));
        return leaksIn(shown.slice(at, at + p.text.length + 2), [p]).length > 0;
      });
      expect(leaks.map((p) => `${at}: ${p.kind}`)).toEqual([]);
    }
  });

  it('masking is stable: masking what it shows changes nothing', () => {
    for (const p of plantedSecrets()) {
      const once = maskSecretsSync(p.text);
      expect(maskSecretsSync(once), p.kind).toBe(once);
    }
  });
});

describe('ordinary text', () => {
  it('facts with dates, ids, versions, URLs without credentials and encodings of non-secrets come out unchanged', () => {
    for (const text of BENIGN) expect(maskSecretsSync(text), text).toBe(text);
  });

  it('each benign fact, encoded the ways a secret is: still unchanged', () => {
    const changed: string[] = [];
    for (const text of BENIGN) {
      for (const e of ENCODINGS) {
        const encoded = e.apply(text, text.slice(0, 12));
        if (maskSecretsSync(encoded) !== encoded) changed.push(`${e.name}: ${encoded.slice(0, 80)}`);
      }
    }
    expect(changed).toEqual([]);
  });

  it('a reading never decodes a hash, a key\'s bytes or a long word as text', () => {
    expect(readings('3f2a9c0d1e4b5a69788776655443322110ffeedd')).toEqual([]);
    expect(readings('configurationManagementAutomationPipeline')).toEqual([]);
    expect(readings('n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=')).toEqual([]);
  });
});
