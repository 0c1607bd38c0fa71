import { chmodSync, copyFileSync, mkdirSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTarget } from '../../../src/snapshot/targets/registry.js';
import type { WardenError } from '../../../src/errors.js';
import { sftpPlace, type TargetPlace } from './fixtures.js';

async function* bytes(b: Buffer): AsyncIterable<Buffer> {
  yield b;
}
const SNAP = '2026-11-29T020000Z';
const failure = (p: Promise<unknown>) => p.then(() => { throw new Error('expected a failure'); }, (e: WardenError) => e);

describe('sftp target', () => {
  let place: TargetPlace;
  beforeAll(async () => {
    place = await sftpPlace();
  }, 60_000);
  afterAll(() => place.stop());

  it('refuses a host whose key is not the configured one', async () => {
    const err = await failure(openTarget(place.config({ hostKeySha256: `SHA256:${'A'.repeat(43)}` }), 'agent'));
    expect(err.message).toMatch(/presented host key SHA256:.*config says SHA256:AAAA.*not connecting/);
    expect(err.transient).toBe(false);
  });

  it('refuses a private key file others can read', async () => {
    const loose = join(place.sshd!.home, 'loose_key');
    copyFileSync(place.sshd!.keyFile, loose);
    chmodSync(loose, 0o644);
    const err = await failure(openTarget(place.config({ privateKeyFile: loose }), 'agent'));
    expect(err.message).toMatch(/loose_key is readable by others.*chmod 600/);
  });

  it('an unreachable host is transient', async () => {
    const err = await failure(openTarget(place.config({ port: 9, timeoutMs: 2000 }), 'agent'));
    expect(err.transient).toBe(true);
  });

  it('temp files a killed upload left are invisible to keys() and removed by cleanPartial', async () => {
    const cfg = place.config() as { path: string };
    const t = await openTarget(cfg as never, 'agent');
    await t.put(SNAP, 'store.db', bytes(Buffer.from('db')));
    await t.put(SNAP, 'manifest.json', bytes(Buffer.from('{}')));
    const dir = join(cfg.path, 'agent', SNAP);
    mkdirSync(join(dir, 'qdrant'), { recursive: true });
    writeFileSync(join(dir, 'qdrant', '.tmp-abcd1234-0-m.snapshot'), 'half');
    expect(await t.keys(SNAP)).toEqual(['manifest.json', 'store.db']);
    expect(await t.cleanPartial()).toEqual([`box:${SNAP}/qdrant/.tmp-abcd1234-0-m.snapshot`]);
    expect(existsSync(join(dir, 'qdrant', '.tmp-abcd1234-0-m.snapshot'))).toBe(false);
    await t.close();
  });
});
