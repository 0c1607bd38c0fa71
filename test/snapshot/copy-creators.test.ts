import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { COPY_KINDS } from '../../src/snapshot/copies.js';

/**
 * Every place in src (and jobs) that creates a file or folder, or a copy elsewhere (an object on a target, a
 * snapshot on the Qdrant server), is either where a registered kind of copy is made (src/snapshot/copies.ts: its
 * `madeIn`), which erase then finds (test/erase/copy-kinds/), or said here to hold no store data, and why.
 * A new creator fails this test until it is one or the other; its count per file is pinned, so a new creator in a
 * file that already makes something is looked at too.
 */
const CREATOR = new RegExp([
  String.raw`\b(mkdirSync|mkdtempSync|writeFileSync|createWriteStream|copyFileSync|renameSync|cpSync|appendFileSync|linkSync|symlinkSync|writeFile|copyFile|rename|mkdir|mkdtemp|appendFile)\(`,
  String.raw`\bopenSync\([^)]*(?:'[wa]|O_CREAT)`, String.raw`\bopen\([^)]*'[wa]`, String.raw`\bopenRemote\([^)]*'[wa]`, 'VACUUM INTO',
  String.raw`\b(PutObjectCommand|CreateMultipartUploadCommand|UploadPartCommand)\(`, String.raw`\.(createSnapshot|recoverFromFile|posixRename|put)\(`,
  String.raw`\bqueue\.(add|upsertJobScheduler)\(`, // a BullMQ job in Redis: its payload, result, error and events
  String.raw`\b(streamToNewFile)\(`, // HELPERS below: each call is a creator where it is made
].join('|'), 'g');

/**
 * Files whose only creators are inside a helper that others call to create files: the helper's name is a creator
 * above, so each of its calls counts in the file that makes the call (the file decides what the new file holds).
 */
const HELPERS: Record<string, string> = {
  'src/core/write-file.ts': 'streamToNewFile: a stream written into a new file, for its callers',
};

/** Files that create something that is no copy of a store's data. */
const NOT_A_COPY: Record<string, string> = {
  'src/core/read-file.ts': 'a file the person names (digest --preview --out): theirs, not memory-warden\'s (docs/erase.md)',
  'src/erase/key.ts': 'erase.key, the installation\'s erase key',
  'src/launch.ts': 'the CLI bundle\'s record of the files it saw',
  'src/snapshot/journal.ts': 'the restore journal: which steps are done, no content',
  'src/snapshot/layout.ts': 'small private files: a snapshot\'s manifest (sizes and checksums, no content), the pushed record',
  'src/snapshot/server-snapshots.ts': 'notes naming the server-side snapshots being made, no content',
  'src/snapshot/targets/auth.ts': 'a target key (snapshots keygen)',
  'src/snapshot/targets/holds.ts': 'sorted runs of the 64-bit keyed hashes holds.json.gz is made of (no id, user or text), in a temp file unlinked as soon as it is opened; holds.json.gz itself, written into the snapshot folder being built (keyed hashes only)',
  'src/snapshot/targets/pushed.ts': 'the newest snapshot name pushed to each target',
  'src/store/private-file.ts': 'memory-warden\'s own SQLite files (the state db, whose records erase scrubs itself; lock sidecars)',
  'src/verifiers/git-cli.ts': 'the verifier\'s cache of what a fact is checked against (a repository), not the store',
  'src/verifiers/git.ts': 'the verifier\'s cache of what a fact is checked against (a repository), not the store',
};

/** How many creators each file has: a new one anywhere makes this test fail until it is looked at. */
const COUNTS: Record<string, number> = {
  'src/core/read-file.ts': 2,
  'src/engines/postgres/snapshot.ts': 2,
  'src/erase/key.ts': 3,
  'src/launch.ts': 3,
  'src/queue/remote.ts': 1,
  'src/queue/schedules.ts': 2,
  'src/queue/tasks.ts': 1,
  'src/snapshot/create.ts': 3,
  'src/snapshot/journal.ts': 2,
  'src/snapshot/layout.ts': 1,
  'src/snapshot/resume.ts': 1,
  'src/snapshot/retention.ts': 1,
  'src/snapshot/server-snapshots.ts': 3,
  'src/snapshot/sqlite-copy.ts': 3,
  'src/snapshot/stage.ts': 2,
  'src/snapshot/targets/auth.ts': 1,
  'src/snapshot/targets/checked.ts': 2,
  'src/snapshot/targets/local/index.ts': 3,
  'src/snapshot/targets/holds.ts': 3,
  'src/snapshot/targets/pushed.ts': 1,
  'src/snapshot/targets/replicate.ts': 7,
  'src/snapshot/targets/s3/journal.ts': 3,
  'src/snapshot/targets/s3/upload.ts': 7,
  'src/snapshot/targets/sftp/index.ts': 3,
  'src/store/private-file.ts': 2,
  'src/vectors/qdrant/index.ts': 1,
  'src/verifiers/git-cli.ts': 2,
  'src/verifiers/git.ts': 2,
};

/**
 * Makers of store copies that no command reaches yet (none today: PostgreSQL's table snapshot is `run snapshot`'s,
 * registered as a maker of the partial folder it writes into). The moment a file outside its folder imports one, the
 * test below fails: its copies must then be a registered kind that erase finds.
 */
const NOT_REACHED: Record<string, string> = {};

function* sources(dir: string): Generator<string> {
  for (const n of readdirSync(dir).sort()) {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) yield* sources(p);
    else if (p.endsWith('.ts')) yield p;
  }
}

/** Creators in code, not in comments. */
function creators(file: string): number {
  let n = 0;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const t = line.trim();
    if (t.startsWith('//') || t.startsWith('*') || t.startsWith('/*')) continue;
    n += (line.replace(/\/\/.*$/, '').match(CREATOR) ?? []).length;
  }
  return n;
}

describe('every creator of files and copies in src is a registered kind of copy, or holds no store data', () => {
  const found = Object.fromEntries([...sources('src'), ...sources('jobs')].filter((f) => !(f in HELPERS)).map((f) => [f, creators(f)] as const).filter(([, n]) => n > 0));
  const makers = new Set<string>(COPY_KINDS.flatMap((k) => k.madeIn));

  it('no file creates anything the registry and this list do not account for', () => {
    for (const file of Object.keys(found)) {
      expect(makers.has(file) || file in NOT_A_COPY || file in NOT_REACHED, `${file} creates files or copies: register the kind of copy it makes in src/snapshot/copies.ts (madeIn), or say in NOT_A_COPY why it holds no store data`).toBe(true);
    }
    expect(found, 'a creator was added or removed: look at it (a new kind of copy? register it), then update COUNTS').toEqual(COUNTS);
  });

  it('a maker no command reaches is imported by nothing outside its own folder', () => {
    for (const file of Object.keys(NOT_REACHED)) {
      const folder = file.slice(0, file.lastIndexOf('/') + 1);
      const tail = file.split('/').slice(-2).join('/').replace(/\.ts$/, '.js'); // postgres/snapshot.js
      const importers = [...sources('src'), ...sources('jobs')].filter((f) => !f.startsWith(folder) && readFileSync(f, 'utf8').includes(`/${tail}'`));
      expect(importers, `${file} is now reached: register the kind of copy it makes in src/snapshot/copies.ts`).toEqual([]);
      expect(found[file], file).toBeGreaterThan(0);
    }
  });

  it('each kind\'s makers do create something, and no file is both a maker and said to hold no store data', () => {
    for (const k of COPY_KINDS) for (const f of k.madeIn) expect(found[f], `${k.name}: ${f}`).toBeGreaterThan(0);
    for (const f of Object.keys(NOT_A_COPY)) expect(makers.has(f), f).toBe(false);
  });
});
