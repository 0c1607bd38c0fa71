import type { Command } from 'commander';
import type { Config } from '../config/config.js';
import type { Logger } from '../log/logger.js';
import { parseInstant, systemClock, type Clock } from '../time/instants.js';
import { usageError } from '../core/errors.js';
import { LOG_LEVELS } from '../log/levels.js';
import { escapedLine, jsonText, terminalText } from '../text/untrusted.js';
import { noProgress, type Progress } from '../progress/progress.js';
import { terminalProgress } from '../progress/terminal.js';

/** Options every store command accepts. */
export interface StoreOptions {
  config?: string;
  store?: string;
  db?: string;
  now?: string;
  json?: boolean;
  pretty?: boolean;
}

export function addStoreOptions(cmd: Command): Command {
  return cmd
    .option('--config <file>', 'config file (YAML); without it, --db alone is enough')
    .option('--store <name>', 'which configured store')
    .option('--db <path>', 'the SQLite store to work on, without a config file');
}

export interface CommandContext {
  config: Config;
  storeName: string;
  log: Logger;
  now: Clock;
  progress: Progress;
}

/** The global options live on the root program; read them from any subcommand. */
export function globalOptions(cmd: Command): { pretty?: boolean; logLevel?: string } {
  let root = cmd;
  while (root.parent) root = root.parent;
  return root.opts();
}

/**
 * Config, logger and clock for a command; `dbStore`, with `--db PATH`, the name that file's store has in the config
 * (see dbStoreIn). Config, logger and store code are imported here, when a command runs, not when `--help` lists
 * the commands.
 */
export async function loadForCommand(opts: StoreOptions, cmd: Command): Promise<{ config: Config; log: Logger; now: Clock; progress: Progress; dbStore?: string }> {
  const [{ quickConfig }, { createLogger }] = await Promise.all([import('../config/read.js'), import('../log/logger.js')]);
  const file = opts.config ?? process.env.MEMORY_WARDEN_CONFIG;
  let config: Config;
  let dbStore = await storeNameForDb(opts.db);
  if (opts.db && file) ({ config, dbStore } = await dbStoreIn(file, opts.db));
  else {
    const load = { file, overrides: opts.db ? { stores: { [dbStore!]: { db: opts.db } } } : undefined };
    // No config file: the build's validated defaults (no zod, no YAML); a file, or anything else, is validated in full.
    // The same value loadConfig gives (test/cli-startup.test.ts compares them), typed by the schema there.
    const quick = quickConfig(load) as Config | undefined;
    if (quick) {
      (await import('../store/files.js')).assertStateApart(quick);
      (await import('../snapshot/root.js')).assertSnapshotRootApart(quick);
    }
    config = quick ?? (await import('../config/config.js')).loadConfig(load);
  }
  const g = globalOptions(cmd);
  const level = logLevel(g.logLevel, process.env.LOG_LEVEL, config.log.level);
  const log = createLogger({ level, ...(g.pretty ? { pretty: true } : {}) });
  return { config, log, now: clockFrom(opts.now), progress: progressFor(opts, level), ...(dbStore !== undefined ? { dbStore } : {}) };
}

/**
 * `--db PATH` with a config file: the store the config has for that same file (a link or another path to it
 * counts), with its settings. Run as a store of its own, a prune would delete rows and leave their Qdrant points,
 * and its records would go under another name. A file the config does not hold is a store of its own, named after
 * it, unless a configured store of another file has that name: run under it, the command would take that store's
 * vector collections, snapshot folder and records for this file's (a prune of a copy deleting the live store's
 * points). That is refused, before anything is read or written.
 */
async function dbStoreIn(file: string, db: string): Promise<{ config: Config; dbStore: string }> {
  const [{ loadConfig }, { expandHome, isPlainObject, readYaml }, { sameFile }] = await Promise.all([import('../config/config.js'), import('../config/read.js'), import('../store/file-identity.js')]);
  const name = (await storeNameForDb(db))!;
  // A config that names no store (most of those given beside --db) is validated once, with the file's store in it:
  // the file as loadConfig parses it (escaped keys and merge keys read alike), the defaults name no store.
  const user = parsed(() => readYaml(file));
  if (isPlainObject(user) && !Object.hasOwn(user, 'stores')) {
    return { config: loadConfig({ file, overrides: { stores: { [name]: { db } } } }), dbStore: name };
  }
  const config = loadConfig({ file });
  const held = Object.keys(config.stores).filter((name) => sameFile(db, expandHome(config.stores[name]!.db)));
  if (held.length > 1) throw usageError(`--db ${db}: config ${file} holds this file as several stores (${held.join(', ')}); give --store NAME instead`);
  if (held.length === 1) return { config, dbStore: held[0]! };
  const other = config.stores[name];
  if (other) throw usageError(`--db ${db}: config ${file} has a store named ${name} for another file (${other.db}); give --store ${name} for that one, or leave the config out for this file`);
  return { config: loadConfig({ file, overrides: { stores: { [name]: { db } } } }), dbStore: name };
}

/**
 * `--log-level`, else LOG_LEVEL (an empty one is unset), else config's (validated with it).
 * A level pino does not know is named with where it came from, not left to pino's "default level:… must be
 * included in custom levels".
 */
function logLevel(option: string | undefined, env: string | undefined, configured: string): string {
  for (const [from, value] of [['--log-level', option], ['LOG_LEVEL', env || undefined]] as const) {
    if (value === undefined) continue;
    if (!(LOG_LEVELS as readonly string[]).includes(value)) throw usageError(`${from}: "${value}" is not a log level (${LOG_LEVELS.join(', ')})`);
    return value;
  }
  return configured;
}

let shownProgress: Progress | undefined;

/**
 * A progress line on stderr only for a person at a terminal: never with --json (a script reads stdout and may log
 * stderr), never when stderr is a file or pipe, and not at debug or trace level, whose log lines come during the
 * long loops and would be cut up by the redraws. At info and above, logs come at a job's start and end.
 */
function progressFor(opts: StoreOptions, level: string): Progress {
  if (opts.json || process.stderr.isTTY !== true || level === 'debug' || level === 'trace') return noProgress;
  shownProgress ??= terminalProgress(process.stderr);
  return shownProgress;
}

/** Take any progress line away (before an error message is written over it). */
export function endProgress(): void {
  shownProgress?.done();
}

/** What `read` returns, or undefined when it throws (loadConfig then says why, naming the file). */
function parsed(read: () => unknown): unknown {
  try {
    return read();
  } catch {
    return undefined;
  }
}

export async function storeContext(opts: StoreOptions, cmd: Command): Promise<CommandContext> {
  const base = await loadForCommand(opts, cmd);
  let ctx: CommandContext;
  if (base.dbStore === undefined) {
    const { selectStore } = await import('../config/read.js');
    ctx = { ...base, storeName: selectStore(base.config, opts.store).name };
  } else {
    if (opts.store !== undefined && opts.store !== base.dbStore) {
      throw usageError(`--store ${opts.store} and --db ${opts.db}: two different stores (that file is ${base.dbStore}); give one of them`);
    }
    ctx = { ...base, storeName: base.dbStore };
  }
  // A folder (or a device …) as the store's file: named where it was given, before anything opens it. A store on
  // another host is not looked for here: its file is there, not at this path.
  const db = ctx.config.stores[ctx.storeName]?.db;
  if (db !== undefined && !(await storeHostElsewhere(ctx))) {
    const { assertStorePath } = await import('../store/store-path.js');
    if (opts.db !== undefined) assertStorePath(opts.db, '--db', 'option');
    else {
      const file = opts.config ?? process.env.MEMORY_WARDEN_CONFIG;
      assertStorePath(db, `${file ? `config ${file}: ` : ''}stores.${ctx.storeName}.db`);
    }
  }
  return ctx;
}

/** The store name `--db PATH` gets (src/store/open.ts), loaded only when there is a --db. */
async function storeNameForDb(db: string | undefined): Promise<string | undefined> {
  if (!db) return undefined;
  const { storeNameForPath } = await import('../layouts/open.js');
  return storeNameForPath(db);
}

/** `--now 2026-11-29T06:00:00Z`: run as if it were that instant (tests, what-if dry runs). */
export function clockFrom(text: string | undefined): Clock {
  if (!text) return systemClock;
  const t = parseInstant(text);
  if (t === null) throw usageError(`--now: "${text}" is not an ISO-8601 time`);
  return () => t;
}

/** Exact JSON (parses back to the same values), with C1, bidi and other hidden characters as `\uXXXX` escapes. */
export function printJson(value: unknown): void {
  process.stdout.write(jsonText(value) + '\n');
}

/**
 * Every human-readable line goes out through here, written as a tagged template: print`${store}: ${n} row(s)`.
 * Each value in it is `show`n on its own, so that no value (store text, a path from the config or the command
 * line, a state-db column, a value from Redis or a remote manifest) can drive the terminal or, with a newline,
 * forge a line; our own words stay as written, `\n` included. The whole line is checked again on its way out.
 */
export function print(words: TemplateStringsArray, ...values: unknown[]): void {
  process.stdout.write(terminalText(line(words, ...values)) + '\n');
}

/**
 * A line as print writes it, for code that builds a line before printing it (a row of a table). Printed as a
 * value, print`${line`…`}`, it reads the same: a shown value holds no hidden character left to show.
 */
export function line(words: TemplateStringsArray, ...values: unknown[]): string {
  return words.reduce((out, word, i) => out + show(String(values[i - 1])) + word);
}

/** Untrusted text for one line: every hidden character, newlines included, named as `\uXXXX` (../untrusted.ts). */
export const show = (text: unknown): string => escapedLine(text);

/**
 * The host that holds the command's store when it is not this machine (src/queue/hosts.ts), else null: erase and
 * restore then run there, through that host's queue (src/queue/remote.ts). Loaded only for a store with a host.
 */
export async function storeHostElsewhere(ctx: CommandContext): Promise<string | null> {
  if (ctx.config.stores[ctx.storeName]?.host === undefined) return null;
  const { hostOfStore, thisHost } = await import('../queue/hosts.js');
  const host = hostOfStore(ctx.config, ctx.storeName);
  return host === thisHost(ctx.config) ? null : host;
}
