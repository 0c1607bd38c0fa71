import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { streamToNewFile } from '../src/core/write-file.js';

describe('streamToNewFile', () => {
  it('a source failing before the file is open: once it rejects, nothing more happens in the folder afterwards', async () => {
    const root = mkdtempSync(join(tmpdir(), 'mw-write-file-'));
    try {
      for (let i = 0; i < 100; i++) {
        const dir = join(root, `d${i}`);
        const src = new Readable({ read() { this.destroy(new Error('larger than recorded')); } });
        mkdirSync(dir);
        await expect(streamToNewFile(join(dir, 'store.db'), { mode: 0o600 }, src)).rejects.toThrow(/larger than recorded/);
        const then = readdirSync(dir);
        await new Promise((r) => setTimeout(r, 5));
        expect(readdirSync(dir), `folder ${i}: a file appeared after the rejection`).toEqual(then);
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('writes a new file with the mode asked, through the stages, and never over an existing one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mw-write-file-'));
    try {
      const file = join(dir, 'holds');
      await streamToNewFile(file, { mode: 0o600 }, Readable.from([Buffer.from('abc'), Buffer.from('def')]));
      expect(statSync(file).mode & 0o777).toBe(0o600);
      writeFileSync(join(dir, 'taken'), 'kept');
      await expect(streamToNewFile(join(dir, 'taken'), { mode: 0o600 }, Readable.from([Buffer.from('x')]))).rejects.toMatchObject({ code: 'EEXIST' });
      expect(readdirSync(dir).sort()).toEqual(['holds', 'taken']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
