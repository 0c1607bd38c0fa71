import { createHmac, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { hmac64, hmacWords } from '../../../src/snapshot/targets/hmac64.js';
import { idMac, idMacInto } from '../../../src/snapshot/targets/holds.js';

const reference = (key: Buffer, text: string) => createHmac('sha256', key).update(`id:${text}`, 'utf8').digest().readBigUInt64BE(0);

describe('hmac64: the holds\' keyed hash through its own SHA-256', () => {
  it('equals HMAC-SHA256 for every length across the block boundaries, under keys shorter, equal to and longer than a block', () => {
    for (const keyLength of [0, 1, 16, 32, 63, 64, 65, 100, 200]) {
      const key = randomBytes(keyLength);
      const mac = hmac64(key, 'id:');
      for (let n = 0; n <= 300; n++) {
        const text = 'x'.repeat(n);
        expect(mac(text), `key ${keyLength} bytes, text ${n}`).toBe(reference(key, text));
      }
    }
  });

  it('encodes as UTF-8 as createHmac does: accents, emoji, lone surrogates, a long text after a short one', () => {
    const key = randomBytes(32);
    const mac = hmac64(key, 'id:');
    const texts = ['', 'é', 'Zoë 🐝', `${'ü'.repeat(300)}-end`, '\ud800', 'a\udc00b', '\u0000', 'x'.repeat(5000), 'm1', '日本語'.repeat(40), 'id:nested'];
    for (const t of texts) expect(mac(t), JSON.stringify(t.slice(0, 20))).toBe(reference(key, t));
    for (let i = 0; i < 2000; i++) {
      const t = `m${i}`;
      expect(mac(t)).toBe(reference(key, t));
      expect(mac(t).toString(16).padStart(16, '0')).toBe(idMac(key, t));
    }
  });

  it('idMac and idMacInto, one key and many, are createHmac\'s first eight bytes', () => {
    const keys = [randomBytes(32), randomBytes(32), randomBytes(70)];
    const texts = ['', 'm1', 'Zoë 🐝', 'a\udc00b', 'x'.repeat(300), ...Array.from({ length: 500 }, (_, i) => `mem-${i}`)];
    for (const key of keys) {
      const into = idMacInto(key);
      const out = Buffer.alloc(texts.length * 8 + 3, 0xaa);
      texts.forEach((t, i) => into(t, out, 3 + i * 8));
      expect(out.subarray(0, 3).equals(Buffer.alloc(3, 0xaa))).toBe(true);
      texts.forEach((t, i) => {
        const ref = createHmac('sha256', key).update(`id:${t}`, 'utf8').digest();
        expect(out.subarray(3 + i * 8, 11 + i * 8).equals(ref.subarray(0, 8)), JSON.stringify(t.slice(0, 20))).toBe(true);
        expect(idMac(key, t)).toBe(ref.toString('hex', 0, 8));
      });
    }
  });

  it('hmacWords of bytes equals hmacWords of their text, across lengths and after a longer message', () => {
    const key = randomBytes(32);
    const w = hmacWords(key, 'id:');
    const texts = ['', 'm1', 'Zoë 🐝', 'x'.repeat(55), 'x'.repeat(56), 'y'.repeat(300), 'short after long', '日本語'.repeat(40), 'z'];
    for (const t of texts) {
      const bytes = Buffer.concat([Buffer.from('??'), Buffer.from(t, 'utf8'), Buffer.from('!!')]);
      const got = [...w.bytes(bytes, 2, bytes.length - 2).subarray(0, 2)];
      expect(got, JSON.stringify(t.slice(0, 20))).toEqual([...w.text(t).subarray(0, 2)]);
      expect((BigInt(got[0]! >>> 0) << 32n) | BigInt(got[1]! >>> 0)).toBe(reference(key, t));
    }
  });
});
