import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ids, makeStore, tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { writeSnapshotFolder } from '../helpers/snapshot-folder.js';
import { fileBytes, guessList, guessedIn, unkeyedDigests, type Person } from '../helpers/guesses.js';

/**
 * Nothing memory-warden keeps or prints about an erased person can be tested against guesses without the erase key:
 * not the state db (file and WAL, as a copy of its folder has them), not `erase receipts` (text or JSON), not what
 * `erase` prints (text, JSON, its log lines). A list of 300 guessed addresses, names and id sets, the person's own
 * among them, hashed every unkeyed way, matches nothing; with the key, `erase receipts --user` finds her receipts.
 */
const CAROL: Person = { email: 'carol.danvers@example.org', name: 'Carol Danvers', ids: ['m_0101', 'm_0102', 'm_0103'] };
const DIGESTS = unkeyedDigests(guessList(CAROL));

let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-erase-guesses-');
});
afterEach(() => tmp.cleanup());

function setup() {
  // Warden layout without a user_id column: --user is the subject equal to the id.
  const db = makeStore(join(tmp.dir, 'memory.db'), [
    ...CAROL.ids.map((id, i) => ({ id, subject: CAROL.email, fact: `Carol Danvers flies to Denver on trip ${i}` })),
    { id: 'm_0200', subject: 'bob@example.org', fact: 'Bob prefers pnpm' },
  ]);
  const backups = join(tmp.dir, 'backups');
  writeSnapshotFolder(backups, 'agent', '2026-11-28T060000Z', { 'store.db': snapshotCopy(db) });
  const stateDb = join(tmp.dir, 'state', 'state.db');
  const config = join(tmp.dir, 'config.yaml');
  writeFileSync(config, `stateDb: ${stateDb}\nsnapshot:\n  root: ${backups}\nstores:\n  agent:\n    db: ${db}\n`);
  const run = (args: string[]) => cli([...args, '--config', config], { LOG_LEVEL: 'info' });
  return { db, stateDb, config, run };
}

/** The store as a snapshot holds it: VACUUM INTO, in rollback-journal mode. */
function snapshotCopy(db: string): string {
  const copy = join(tmp.dir, 'copy.db');
  const src = new Database(db);
  src.exec(`VACUUM INTO '${copy}'`);
  src.close();
  const c = new Database(copy);
  c.pragma('journal_mode = DELETE');
  c.close();
  return copy;
}

const SELECTORS: [string, string[]][] = [
  ['--user, an address', ['--user', CAROL.email]],
  ['--subject, a full name', ['--subject', CAROL.name]],
  ['--ids, every memory id', ['--ids', ...CAROL.ids]],
];

describe('what erase keeps and prints cannot be tested against guesses without the key', () => {
  it.each(SELECTORS)('%s: the state db, erase receipts (text, JSON) and the printed receipt match no guess', (_, selector) => {
    const s = setup();
    const seen: [where: string, what: string | Buffer][] = [];
    const keep = (where: string, r: { stdout: string; stderr: string }) => seen.push([`${where} stdout`, r.stdout], [`${where} stderr`, r.stderr]);

    const dry = s.run(['erase', '--store', 'agent', ...selector, '--dry-run']);
    expect(dry.code, dry.stderr).toBe(0);
    keep('erase --dry-run', dry);
    const first = s.run(['erase', '--store', 'agent', ...selector]);
    expect(first.code, first.stderr).toBe(1); // the snapshot still holds her
    expect(first.stdout).toMatch(/selected by \w+ \(HMAC [0-9a-f]{16}…\)/);
    keep('erase', first);
    const second = s.run(['erase', '--store', 'agent', ...selector, '--snapshots', '--json']);
    expect(second.code, second.stderr).toBe(0);
    keep('erase --snapshots --json', second);
    const receipt = JSON.parse(second.stdout) as { selectorSha256: string; idsSha256: string; keyId: string };
    expect(receipt.selectorSha256).toMatch(/^[0-9a-f]{64}$/);
    expect(receipt.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(ids(s.db)).toEqual(['m_0200']);

    const list = s.run(['erase', 'receipts']);
    const listJson = s.run(['erase', 'receipts', '--json']);
    expect(listJson.code).toBe(0);
    expect(listJson.json<unknown[]>()).toHaveLength(2);
    keep('erase receipts', list);
    keep('erase receipts --json', listJson);
    seen.push(['state db', fileBytes(s.stateDb)]);

    for (const [where, what] of seen) {
      expect(guessedIn(what, DIGESTS), where).toEqual([]);
      const text = (typeof what === 'string' ? what : what.toString('latin1')).toLowerCase();
      for (const plain of [CAROL.email, CAROL.name, ...CAROL.ids]) expect(text.includes(plain.toLowerCase()), `${where}: ${plain}`).toBe(false);
    }

    // The key's holder can still find her receipts: the selector's keyed digest, computed with the key.
    const hers = s.run(['erase', 'receipts', '--json', ...selector]);
    expect(hers.code, hers.stderr).toBe(0);
    expect(hers.json<{ selector_sha256: string }[]>().map((r) => r.selector_sha256)).toEqual([receipt.selectorSha256, receipt.selectorSha256]);
    const others = s.run(['erase', 'receipts', '--json', '--user', 'bob@example.org']);
    expect(others.json<unknown[]>()).toEqual([]);
  });
});
