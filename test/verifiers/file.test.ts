import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, linkSync, mkdirSync, mkdtempSync, realpathSync, renameSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import file from '../../src/verifiers/file.js';
import { readUnderRoots } from '../../src/verifiers/context.js';
import { runVerifier } from '../../src/drift/dispatch.js';
import { Refusal } from '../../src/verifiers/types.js';

const SECRET = 'TOPSECRET-FILE';

/** A temp folder holding the allowed root and, beside it, a folder that must never be read. */
function folders(): { base: string; root: string; outside: string } {
  const base = realpathSync(mkdtempSync(join(tmpdir(), 'warden-file-')));
  const [root, outside] = [join(base, 'allowed'), join(base, 'outside')];
  for (const d of [root, outside]) mkdirSync(d);
  return { base, root, outside };
}

/**
 * Real files: an allowed root and, beside it, a folder that must never be read. The swaps are made from the hook
 * between the path check and the open, exactly where a racing writer would land, so no timing is needed.
 */
describe('reading a file under the roots', () => {
  let base: string;
  let root: string;
  let outside: string;
  beforeEach(() => {
    ({ base, root, outside } = folders());
    for (const d of [join(root, 'sub'), join(outside, 'sub')]) mkdirSync(d);
    writeFileSync(join(root, 'db.json'), JSON.stringify({ v: 'inside' }));
    writeFileSync(join(root, 'sub', 'x.json'), JSON.stringify({ v: 'inside sub' }));
    writeFileSync(join(root, 'sub', 'zero'), 'inside');
    writeFileSync(join(outside, 'secret.json'), JSON.stringify({ v: SECRET }));
    writeFileSync(join(outside, 'sub', 'x.json'), JSON.stringify({ v: SECRET }));
  });
  afterEach(() => rmSync(base, { recursive: true, force: true }));

  const read = (path: string, beforeOpen?: () => void, procFd?: string) => readUnderRoots(path, [root], [root], { beforeOpen, procFd });
  /** The folder `sub` swapped for a symlink to `target`, after the check. */
  const swapSub = (target: string) => () => {
    renameSync(join(root, 'sub'), join(root, 'sub.old'));
    symlinkSync(target, join(root, 'sub'));
  };
  const refused = async (p: Promise<unknown>, why: RegExp) => {
    const err = await p.then(
      (r) => new Error(`read ${JSON.stringify(r)}`),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Refusal);
    expect((err as Error).message).toMatch(why);
  };

  it('reads a file as it was checked', async () => {
    expect(await read('db.json')).toEqual({ path: join(root, 'db.json'), text: '{"v":"inside"}' });
    expect(await read(join(root, 'sub', 'x.json'), undefined, join(base, 'no-proc'))).toMatchObject({ text: '{"v":"inside sub"}' });
  });

  it('refuses the file swapped for a symlink out after the check', async () => {
    const swap = () => {
      renameSync(join(root, 'db.json'), join(root, 'db.old'));
      symlinkSync(join(outside, 'secret.json'), join(root, 'db.json'));
    };
    await refused(read('db.json', swap), /turned into a symlink/);
  });

  it('refuses a folder on the way swapped for a symlink out, by name or through /proc/self/root', async () => {
    await refused(read('sub/x.json', swapSub(join(outside, 'sub'))), /led outside the allowed roots/);
    rmSync(join(root, 'sub'));
    renameSync(join(root, 'sub.old'), join(root, 'sub'));
    await refused(read('sub/x.json', swapSub(`/proc/self/root${outside}/sub`)), /led outside the allowed roots/);
  });

  it('refuses a folder swapped for /dev: /dev/zero is opened, never read', async () => {
    await refused(read('sub/zero', swapSub('/dev')), /led outside the allowed roots/);
  });

  it('refuses the file swapped for a symlink to /dev/zero', async () => {
    const swap = () => {
      rmSync(join(root, 'db.json'));
      symlinkSync('/dev/zero', join(root, 'db.json'));
    };
    await refused(read('db.json', swap), /turned into a symlink/);
  });

  it('does not wait on a FIFO swapped in, nor read it', async () => {
    const swap = () => {
      rmSync(join(root, 'db.json'));
      execFileSync('mkfifo', [join(root, 'db.json')]);
    };
    await expect(read('db.json', swap)).rejects.toThrow(/not a regular file/);
  });

  it('without /proc, refuses a file the checked path no longer names', async () => {
    await refused(read('sub/x.json', swapSub(join(outside, 'sub')), join(base, 'no-proc')), /led outside the allowed roots/);
  });

  it('reads a hard link inside a root to a file elsewhere: it is in the root by that name', async () => {
    const swap = () => {
      rmSync(join(root, 'db.json'));
      linkSync(join(outside, 'secret.json'), join(root, 'db.json'));
    };
    expect(await read('db.json', swap)).toMatchObject({ path: join(root, 'db.json'), text: expect.stringContaining(SECRET) });
  });

  it('never reads outside while a writer swaps the file and a symlink out, over and over', async () => {
    writeFileSync(join(base, 'regular'), JSON.stringify({ v: 'inside' }));
    symlinkSync(join(outside, 'secret.json'), join(base, 'link'));
    // The probe's swapper: renames a copy of the file, then the symlink, over the checked name, without pause.
    const swapper = spawn(process.execPath, [
      '-e',
      `const f = require('node:fs'); const [b, r] = process.argv.slice(1);
       for (;;) { f.linkSync(b + '/regular', r + '/.t'); f.renameSync(r + '/.t', r + '/r.json'); f.symlinkSync(b + '/link', r + '/.l'); f.renameSync(r + '/.l', r + '/r.json'); }`,
      base,
      root,
    ]);
    try {
      while (!existsSync(join(root, 'r.json'))) await new Promise((r) => setTimeout(r, 5)); // the swapper has started
      let reads = 0;
      for (let i = 0; i < 1000; i++) {
        const got = await read('r.json').catch(() => undefined);
        if (got) reads += 1;
        expect(got?.text ?? '').not.toContain(SECRET);
      }
      expect(reads).toBeGreaterThan(0); // the swapper left some reads through: the test raced
    } finally {
      swapper.kill();
    }
  });
});

describe('the file verifier', () => {
  let base: string;
  let root: string;
  let outside: string;
  beforeEach(() => {
    ({ base, root, outside } = folders());
    writeFileSync(join(root, 'db.json'), JSON.stringify({ database: { version: '15' } }));
    writeFileSync(join(outside, 'secret.json'), JSON.stringify({ database: { version: SECRET } }));
  });
  afterEach(() => rmSync(base, { recursive: true, force: true }));

  const run = (path: string) => runVerifier(file, { path, select: '$.database.version' }, { allow: { fileRoots: [root] }, timeoutMs: 5000 });

  it('refuses every way out of the roots, and reads nothing there', async () => {
    symlinkSync(join(outside, 'secret.json'), join(root, 'link.json'));
    symlinkSync(outside, join(root, 'dirlink'));
    symlinkSync('/dev/zero', join(root, 'zero.json'));
    const cases: [string, RegExp][] = [
      ['link.json', /symlink/],
      ['dirlink/secret.json', /symlink/],
      [join(root, 'dirlink', 'secret.json'), /symlink/],
      ['zero.json', /symlink/],
      [`/proc/self/root${outside}/secret.json`, /outside the allowed roots/],
      [`/proc/self/root${root}/db.json`, /outside the allowed roots/],
      ['../outside/secret.json', /"\.\." segment/],
    ];
    for (const [path, why] of cases) {
      const r = await run(path);
      expect(r, path).toMatchObject({ verdict: 'refused', reason: expect.stringMatching(why) });
      expect(JSON.stringify(r)).not.toContain(SECRET);
    }
  });

  it('a FIFO, a folder and a file above the limit are unverifiable, at once', async () => {
    execFileSync('mkfifo', [join(root, 'fifo.json')]);
    mkdirSync(join(root, 'folder.json'));
    writeFileSync(join(root, 'huge.json'), '');
    truncateSync(join(root, 'huge.json'), 11 * 1024 * 1024);
    // At once: a FIFO opened to be read would wait for a writer that never comes (the test's timeout would say so).
    expect(await run('fifo.json')).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/not a regular file/) });
    expect(await run('folder.json')).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/not a regular file/) });
    expect(await run('huge.json')).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/larger than/) });
  });

  it('reads a file, a symlink inside the roots and a hard link', async () => {
    symlinkSync(join(root, 'db.json'), join(root, 'alias.json'));
    linkSync(join(outside, 'secret.json'), join(root, 'hard.json'));
    expect(await run('db.json')).toMatchObject({ value: '15', evidence: { path: join(root, 'db.json') } });
    expect(await run('alias.json')).toMatchObject({ value: '15', evidence: { path: join(root, 'db.json') } });
    expect(await run('hard.json')).toMatchObject({ value: SECRET, evidence: { path: join(root, 'hard.json') } });
  });
});
