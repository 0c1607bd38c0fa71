import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';

/**
 * What someone without the erase key does with what memory-warden keeps or prints: hash a list of guesses (addresses,
 * full names, sets of memory ids) every way an unkeyed digest could have been made, and look for each digest, or the
 * start of one as a line prints it (12 hex digits), or its raw bytes. The person erased is among the guesses.
 */
export interface Person {
  email: string;
  name: string;
  ids: string[];
}

/** 300 guesses: 100 addresses, 100 names, 100 sets of ids, the person's own among them. */
export function guessList(p: Person): string[] {
  const first = ['alex', 'sam', 'carol', 'dana', 'eve', 'frank', 'gina', 'hugo', 'ines', 'jon'];
  const last = ['danvers', 'smith', 'rossi', 'berg', 'ng', 'okafor', 'silva', 'kim', 'weber', 'novak'];
  const names = first.flatMap((f) => last.map((l) => `${f[0]!.toUpperCase()}${f.slice(1)} ${l[0]!.toUpperCase()}${l.slice(1)}`));
  const emails = first.flatMap((f) => last.map((l) => `${f}.${l}@example.org`));
  const prefix = p.ids[0]!.replace(/\d+$/, '');
  const width = p.ids[0]!.length - prefix.length;
  const id = (n: number) => `${prefix}${String(n).padStart(width, '0')}`;
  const sets = Array.from({ length: 99 }, (_, i) => Array.from({ length: 1 + (i % 5) }, (_, j) => id(100 + i + j)).join('\n'));
  return [...new Set([...emails.slice(0, 99), p.email, ...names.slice(0, 99), p.name, ...sets, [...p.ids].sort().join('\n')])];
}

/** Every unkeyed digest of every guess: sha256, sha1 and md5 of it as is, lower case, and with a kind prefix. */
export function unkeyedDigests(guesses: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const g of guesses) {
    for (const form of new Set([g, g.toLowerCase(), g.trim()])) {
      for (const text of [form, `user:${form}`, `subject:${form}`, `ids:${form}`, `id:${form}`, `selector:${form}`]) {
        for (const alg of ['sha256', 'sha1', 'md5']) out.set(createHash(alg).update(text, 'utf8').digest('hex'), `${alg}(${JSON.stringify(text)})`);
      }
    }
  }
  return out;
}

/** What in `haystack` (text or bytes) a guess's digest matches: the digest, its first 12 hex digits, or its bytes. */
export function guessedIn(haystack: string | Buffer, digests: ReadonlyMap<string, string>): string[] {
  const text = (typeof haystack === 'string' ? haystack : haystack.toString('latin1')).toLowerCase();
  const bytes = typeof haystack === 'string' ? undefined : haystack;
  const hits: string[] = [];
  for (const [hex, what] of digests) {
    if (text.includes(hex.slice(0, 12)) || bytes?.includes(Buffer.from(hex, 'hex'))) hits.push(what);
  }
  return hits;
}

/** The bytes of a SQLite file with its WAL and journal, as someone who copies the folder gets them. */
export function fileBytes(path: string): Buffer {
  return Buffer.concat([path, `${path}-wal`, `${path}-journal`].filter((f) => existsSync(f)).map((f) => readFileSync(f)));
}
