import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { makeStore, tempDir } from '../helpers/store.js';
import { startStoreThread, warmStoreThread } from '../../src/store/thread.js';
import { cli } from '../helpers/cli.js';

describe('the store thread', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const count = { sql: 'SELECT count(*) AS n FROM memory', params: {} };

  it('a spare started ahead serves the next store asked for; the one after gets a thread of its own', async () => {
    const a = makeStore(join(dir, 'a.db'), [{ id: 'x' }, { id: 'y' }]);
    const b = makeStore(join(dir, 'b.db'), [{ id: 'z' }]);
    warmStoreThread();
    warmStoreThread(); // one spare, however often asked
    const first = startStoreThread(a, { readonly: true, busyMs: 1000 });
    const second = startStoreThread(b, { readonly: true });
    expect(await first.call('all', count)).toMatchObject({ result: [{ n: 2 }] });
    expect(await second.call('all', count)).toMatchObject({ result: [{ n: 1 }] });
    await Promise.all([first.close(), second.close()]);
    expect(await first.call('all', count)).toBeNull(); // closed: no thread to answer
  });

  it('a file that will not open there answers each call with the error, spare or not', async () => {
    const junk = join(dir, 'junk.db');
    writeFileSync(junk, 'not a database, '.repeat(512));
    for (const warm of [true, false]) {
      if (warm) warmStoreThread();
      const thread = startStoreThread(warm ? junk : join(dir, 'missing.db'), { readonly: true });
      const r = await thread.call('all', count);
      expect(r?.error).toMatch(warm ? /not a database/ : /unable to open|no such file|SQLITE_CANTOPEN/i);
      await thread.close();
    }
  });

  it('an unused spare does not keep the process alive: a digest of a store too small for the thread exits', () => {
    const db = makeStore(join(dir, 's.db'), [{ id: 'x' }]);
    const r = cli(['digest', '--preview', '--db', db], { MEMORY_WARDEN_STATE: join(dir, 'state.db'), MEMORY_WARDEN_CONFIG: '' });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0); // spawnSync's timeout (60 s) would end a process the spare kept alive, with no status
    expect(r.stdout).toContain('Subject:');
  });
});
