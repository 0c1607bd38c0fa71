import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeStore, tempDir, ids } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { writeSnapshotFolder } from '../helpers/snapshot-folder.js';

let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-erase-cli-');
});
afterEach(() => tmp.cleanup());

function setup() {
  const db = makeStore(join(tmp.dir, 'memory.db'), [
    { id: 'a1', subject: 'alice', fact: 'Alice takes insulin daily' },
    { id: 'b1', subject: 'bob', fact: 'Bob prefers pnpm' },
  ]);
  const backups = join(tmp.dir, 'backups');
  writeSnapshotFolder(backups, 'agent', '2026-11-28T060000Z', { 'store.db': db });
  const config = join(tmp.dir, 'config.yaml');
  writeFileSync(config, `stateDb: ${join(tmp.dir, 'state.db')}\nsnapshot:\n  root: ${backups}\nstores:\n  agent:\n    db: ${db}\n`);
  return { db, config, env: { MEMORY_WARDEN_STATE: join(tmp.dir, 'state.db') } };
}

describe('memory-warden erase', () => {
  it('dry run changes nothing; a run prints a receipt, exits 1 while a snapshot still holds the text, 0 once deleted', () => {
    const { db, config, env } = setup();
    const dry = cli(['erase', '--config', config, '--store', 'agent', '--subject', 'insulin', '--dry-run', '--json'], env);
    expect(dry.code).toBe(0);
    expect(dry.json()).toMatchObject({ dryRun: true, memories: 1, id: null });
    expect(ids(db)).toEqual(['a1', 'b1']);

    const run = cli(['erase', '--config', config, '--store', 'agent', '--subject', 'insulin', '--json'], env);
    expect(run.code).toBe(1);
    const receipt = run.json();
    expect(receipt).toMatchObject({ memories: 1, vacuumed: true, snapshots: { found: [join(tmp.dir, 'backups', 'agent', '2026-11-28T060000Z')], deleted: [] } });
    expect(run.stdout).not.toMatch(/insulin|Alice/);
    expect(ids(db)).toEqual(['b1']);

    const snaps = cli(['erase', '--config', config, '--store', 'agent', '--subject', 'insulin', '--snapshots'], env);
    expect(snaps.code).toBe(0);
    expect(snaps.stdout).toMatch(/snapshot deleted: .*2026-11-28T060000Z/);
    expect(snaps.stdout).toMatch(/places: .*state:drift_verdicts 0.*files:snapshot folders 1/);

    const list = cli(['erase', 'receipts', '--config', config, '--json'], env);
    expect(list.code).toBe(0);
    expect(list.json().map((r: { memories: number }) => r.memories)).toEqual([1, 0]);
    expect(JSON.parse(list.json()[0].places)).toContainEqual({ place: 'store:rows', count: 1 });
    expect(list.stdout).not.toMatch(/insulin/);
  });

  it('needs exactly one selector', () => {
    const { config, env } = setup();
    expect(cli(['erase', '--config', config, '--store', 'agent'], env).code).toBe(2);
    const both = cli(['erase', '--config', config, '--store', 'agent', '--user', 'alice', '--subject', 'insulin'], env);
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/exactly one of --user ID, --subject TEXT, --ids ID/);
  });
});
