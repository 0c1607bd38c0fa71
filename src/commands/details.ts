import type { Command } from 'commander';

/**
 * What a command's one-line description leaves out (JSON keys, what exactly it changes, where to read more), by the
 * words that name the command under `memory-warden`. buildProgram() adds each to the end of that command's `--help`,
 * and docs/commands.md is generated from the same tree (src/commands/reference.ts): one text, in both places. A
 * place to read more is cited as `docs/<page>.md#<anchor>` or `README.md#<anchor>`; a test checks that every page and
 * heading cited exists.
 */
export const COMMAND_DETAILS: Record<string, string> = {
  init:
    'Adds what a store in use lacks: the columns (`source`, `confirmed_at`, `expires_at`, `superseded_by`, `last_used_at`), ' +
    'indexes and the `live_memory` view, without losing a row (an earlier definition of the view is replaced), and switches ' +
    'on WAL. Idempotent. Refuses a store that fails `PRAGMA integrity_check`, changing nothing. A SQLite store of a layout ' +
    'whose SDK makes its tables (`mem0`, `mastra`) gets nothing: `init --store` says so and exits 0, `--create` is refused, ' +
    'and `init --db` of a file holding such an SDK\'s tables (and no `memory` table) is refused (exit 2), naming the layout. ' +
    'A PostgreSQL store gets what its layout needs in its database (docs/postgres.md).',
  check:
    '`PRAGMA integrity_check`, broken supersede chains (`PRAGMA foreign_key_check`) with ids, journal mode, rows vs live ' +
    'rows (the health gap), empty sources, non-canonical and unparseable timestamps, live rows due for review. JSON keys: ' +
    '`ok`, `store`, `path` (the file, or `postgres schema NAME`), `checkedAt`, `rows`, `live`, `gap`, `integrity`, ' +
    '`journalMode`, `dangling`, `reviewDue`, `problems` (`{code, severity, message, count?, ids?}`), `notes`, `file` (the ' +
    'checked file\'s identity, which the digest matches its last integrity run by).',
  'run prune':
    'Deletes rows expired at `now` and superseded rows created more than 180 days before `now`, letting `ON DELETE ' +
    'CASCADE` take the older versions behind them. JSON: `store`, `now`, `dryRun`, `deleted`, `expired`, `superseded`, ' +
    '`cascaded`, `batches`, `ids` (first 1000; `idsTruncated` when there were more), `durationMs`; on a Mastra or mem0 ' +
    'store also `leftovers`, what the SDK\'s own deletes left and this prune ' +
    'removed, by the check code that names it (docs/mastra-layout.md, docs/mem0-layout.md); on a Mastra store also ' +
    '`counts`: `threads` idle past retention, `messages` past theirs, and with the threads their `threadMessages`, ' +
    '`embeddings` and `observations` (the text output says these). `--dry-run` reports the ' +
    'same numbers, deletes nothing and is not recorded as a run of the job.',
  'run integrity': 'The job form of `check` (what the worker schedules).',
  'run snapshot': 'One coordinated SQLite + Qdrant snapshot folder, verified, then retention (docs/snapshots.md#coordinated-snapshots).',
  'run drift':
    'Re-checks the review queue against the sources the memories name, through verifier plugins (docs/drift.md#drift-re-verification).',
  'run digest': 'The digest job as the worker runs it: the daily email, sent once per day (docs/digest-and-review.md#the-daily-digest).',
  review: 'Each decision is one transaction, recorded (docs/digest-and-review.md#reviewing).',
  serve: 'The same decisions as `review`, with buttons, reached from the digest (docs/digest-and-review.md#the-review-page).',
  'repair dangling':
    'Deletes in short transactions, chains of any length, and prints what it removed. It never resets them to NULL: ' +
    'that would put a corrected fact back into `live_memory`. JSON: `store`, `deleted`, `dangling`, `cascaded`; on a PostgreSQL store ' +
    'also `foreignKey`, what its schema says of the key (docs/postgres.md#what-works).',
  'repair timestamps':
    'Rewrites parseable non-canonical timestamps to canonical UTC `YYYY-MM-DD HH:MM:SS`; leaves for a person the ' +
    'unparseable ones and those whose UTC instant falls outside the years 0000-9999 (`9999-12-31T23:59:59-12:00`), which ' +
    'no canonical text holds. JSON: `store`, `rewritten`, `unparseable`, `outOfRange`, `changes`. On a PostgreSQL store nothing is ' +
    'rewritten (`timestamptz` holds instants only): infinite and out-of-range times are listed in `left`, and `notes` say ' +
    'what the column types decide (docs/postgres.md#what-works).',
  'snapshots list': '`--target` lists that target\'s snapshots instead of the local ones (docs/snapshots.md#snapshots-off-the-machine). Snapshots an erase removed are marked `ERASED` (`erased` in `--json`) and never offered as `latest`.',
  'snapshots keygen':
    'The key is 64 hex digits, mode 0600, never written over an existing file; prints its key id. Keep a copy with the age ' +
    'identity, never on the target. Same as `(umask 077; openssl rand -hex 32 > FILE)`.',
  restore:
    'The erase ledger is re-applied to what is restored before it goes live: the output, and `erasedKeptOut` in `--json`, ' +
    'say how many erased memories it kept out; without the state db and erase key it is refused unless ' +
    '`--without-erase-ledger` (docs/erase.md#no-restore-brings-an-erased-person-back). NAME is one of the store\'s ' +
    'snapshots; `latest` its newest scheduled one by sequence number, never one an erase removed. ' +
    'With `--target NAME`, DIR is a snapshot name on that target (or `latest`): downloaded, verified, decrypted (into a ' +
    '`.fetch-` folder its first step names: a plaintext copy, removed at the end), then restored the same way.',
  erase:
    'Removes every copy killed runs left; prints and keeps a receipt without content (docs/erase.md#erase-right-to-erasure). ' +
    'JSON `unreached`: what it knows it could not reach in the store (`what`, `facts`, `reach`: how the operator reaches it).',
  'erase receipts':
    'Counts, places, times, and digests keyed under the erase key; with a selector, only its receipts (found with the ' +
    'key). JSON keys as stored: `selector_sha256` and `ids_sha256` (HMAC-SHA256; null on a receipt from before keyed ' +
    'receipts), `key_id`, `places` …',
  'erase key': 'Hashes made under an earlier key can no longer be matched (docs/erase.md#the-erase-key). JSON keys: `path`, `keyId`, `replaced`.',
  config: 'Secrets are blanked.',
  worker: 'The deployed form: runs the schedule of this host\'s stores (docs/worker.md#the-worker, docs/fleet.md#a-fleet-stores-on-many-machines-one-redis).',
  schedule: 'Before any worker has started, the next runs are computed from the config.',
  fleet:
    'Writes nothing to Redis (docs/fleet.md#a-fleet-stores-on-many-machines-one-redis). JSON keys: `now`, `prefix`, `hosts` ' +
    '(`host`, `version`, `pid`, `lastSeen`, `silent`, `stopped`, `neverSeen`, `stores`), `global`, `anyHost` (the stores ' +
    'every host reaches), `silent`, `overdue`.',
};

/** The words that name `cmd` under the root: `erase receipts`. */
export function commandWords(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command | null = cmd; c?.parent; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/** Every command of the tree, depth first, in the order they were added; the root first. */
export function everyCommand(root: Command): Command[] {
  const out: Command[] = [];
  const walk = (c: Command) => {
    out.push(c);
    for (const sub of c.commands) walk(sub);
  };
  walk(root);
  return out;
}

/** The details of each command, at the end of its `--help`. */
export function addCommandDetails(root: Command): void {
  for (const cmd of everyCommand(root)) {
    const text = COMMAND_DETAILS[commandWords(cmd)];
    if (text !== undefined) cmd.addHelpText('after', `\n${wrap(text, 100)}\n`);
  }
}

/** Text in lines of at most `width` characters, broken between words (a longer word stays whole). */
export function wrap(text: string, width: number): string {
  const lines: string[] = [];
  let current = '';
  for (const word of text.split(/\s+/)) {
    if (current && current.length + 1 + word.length > width) {
      lines.push(current);
      current = word;
    } else current = current ? `${current} ${word}` : word;
  }
  if (current) lines.push(current);
  return lines.join('\n');
}
