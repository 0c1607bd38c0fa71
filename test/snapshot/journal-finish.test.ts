import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { finishCommand, type RestoreJournal } from '../../src/snapshot/journal.js';

const journal = (over: Partial<RestoreJournal> & Record<string, unknown>): RestoreJournal => ({
  format: 1, store: 'agent', from: '/srv/snaps/2026-11-29', undo: null, direction: 'forward', recovered: [], sqliteDone: false,
  file: null, pid: 1, startedAt: '2026-11-29T07:00:00.000Z', ...over,
}) as RestoreJournal;

/** The words a POSIX shell makes of `line` (bash, no command run: printf shows each word on its own line). */
const shellWords = (line: string) => spawnSync('bash', ['-c', `set -- ${line}; printf '%s\\0' "$@"`], { encoding: 'utf8' }).stdout.split('\0').slice(0, -1);

describe('the command that finishes an interrupted restore', () => {
  it('names the store as the restore was told it: --config and --store, --db, or --store alone', () => {
    expect(finishCommand(journal({}))).toBe('memory-warden restore /srv/snaps/2026-11-29 --store agent');
    expect(finishCommand(journal({ namedBy: { config: '/etc/mw.yaml' } }))).toBe('memory-warden restore /srv/snaps/2026-11-29 --config /etc/mw.yaml --store agent');
    expect(finishCommand(journal({ namedBy: { config: '/etc/mw.yaml', db: '/var/agent/store.db' } }))).toBe('memory-warden restore /srv/snaps/2026-11-29 --config /etc/mw.yaml --db /var/agent/store.db');
  });

  it('each path and name one shell word, whatever the journal holds: the file is data, not a command', () => {
    const from = "/srv/my snaps/it's; rm -rf ~ $(id) `id`\nnext";
    const j = journal({ from, store: 'a;b $(id)', namedBy: { config: '/etc/my cfg/`x`.yaml', db: "/var/a'b/store.db" } });
    expect(shellWords(finishCommand(j).replace(/^memory-warden /, ''))).toEqual(['restore', from, '--config', '/etc/my cfg/`x`.yaml', '--db', "/var/a'b/store.db"]);
    const noDb = journal({ store: 'a;b $(id)', namedBy: { config: 7, db: ['x'] } as never });
    expect(shellWords(finishCommand(noDb).replace(/^memory-warden /, ''))).toEqual(['restore', '/srv/snaps/2026-11-29', '--store', 'a;b $(id)']);
    expect(finishCommand(journal({ namedBy: 'oops' as never }))).toBe('memory-warden restore /srv/snaps/2026-11-29 --store agent');
    expect(finishCommand(j)).not.toMatch(/[\n\r\x00-\x1f]/); // one line: a newline in a path is written \x0a
  });
});
