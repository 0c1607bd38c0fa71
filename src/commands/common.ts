import type { Command } from 'commander';
import type { Config } from '../config/config.js';
import type { Logger } from '../log/logger.js';
import { parseInstant, systemClock, type Clock } from '../time/instants.js';
import { usageError } from '../core/errors.js';
import { LOG_LEVELS } from '../log/levels.js';
import { escapedLine, jsonText, terminalText } from '../text/untrusted.js';
import type { StoreNaming } from '../digest/untrusted.js';
import { noProgress, type Progress } from '../progress/progress.js';
import { terminalProgress } from '../progress/terminal.js';
import { JOB_SCOPES } from './job-names.js';

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
  /** The store's host when it is another machine (a command routed there, see routedToStoreHost), else null. */
  storeHost: string | null;
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
export async function loadForCommand(opts: StoreOptions, cmd: Command, use: { oneStore?: boolean } = {}): Promise<Loaded> {
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
  const now = clockFrom(opts.now);
  // The store the command works on, when it works on one: --db's, else --store, else the config's only store.
  let storeName: string | undefined;
  if (use.oneStore) {
    // --store with no config file: say that the file is what is missing, not that it lacks the store.
    if (dbStore === undefined && !file && opts.store !== undefined) throw usageError(`--store ${opts.store}: no config file to find it in (give --config FILE, or set MEMORY_WARDEN_CONFIG)`);
    if (dbStore === undefined) storeName = (await import('../config/read.js')).selectStore(config, opts.store).name;
    else if (opts.store !== undefined && opts.store !== dbStore) {
      throw usageError(`--store ${opts.store} and --db ${opts.db}: two different stores (that file is ${dbStore}); give one of them`);
    } else storeName = dbStore;
  }
  const named = [...new Set([...storesNamed(cmd), ...(dbStore !== undefined ? [dbStore] : []), ...(storeName !== undefined ? [storeName] : [])])];
  await storesOnItsEngines(config, cmd, named);
  const storeHost = await storesHere(config, cmd, named, opts.config);
  return {
    config, log, now, progress: progressFor(opts, level), storeHost,
    ...(dbStore !== undefined ? { dbStore } : {}), ...(storeName !== undefined ? { storeName } : {}),
  };
}

/** What loadForCommand gives a command. */
export interface Loaded {
  config: Config;
  log: Logger;
  now: Clock;
  progress: Progress;
  /** With --db PATH, the name that file's store has in the config (see dbStoreIn). */
  dbStore?: string;
  /** The one store a single-store command works on (loadForCommand with oneStore). */
  storeName?: string;
  /**
   * The host that holds the command's store when that is another machine (only a command that runs there, through
   * its host's queue, gets this far: see routedToStoreHost), else null.
   */
  storeHost: string | null;
}

/**
 * The commands that take a store on another host to that host, through its queue (src/queue/remote.ts): erase,
 * restore and enqueue. Every other command is refused a store on another host (storesHere).
 */
const ROUTED = new WeakSet<Command>();

/** Mark a command as one that runs on the store's host itself when that is another machine (it reads `storeHost`). */
export function routedToStoreHost<C extends Command>(cmd: C): C {
  ROUTED.add(cmd);
  return cmd;
}

/** Commands that run on a store of any engine (the rest run on SQLite stores only, see storesOnItsEngines). */
const ANY_ENGINE = new WeakSet<Command>();

/**
 * Mark a command as one that runs on every store engine: it reaches its store through the engine (init, check),
 * or through a job, which says the engines it runs on itself (src/job/runner.ts refuses the others).
 */
export function onAnyEngine<C extends Command>(cmd: C): C {
  ANY_ENGINE.add(cmd);
  return cmd;
}

/**
 * The one place a command meets a store of an engine it does not run on yet (a PostgreSQL store, for every command
 * that reads store files): refused, exit 2, naming the store, before anything is opened. A command that takes a store
 * and is given none covers every configured store (the digest), so each of them must be of an engine it runs on.
 */
async function storesOnItsEngines(config: Config, cmd: Command, named: readonly string[]): Promise<void> {
  if (ANY_ENGINE.has(cmd)) return;
  const takesStore = cmd.options.some((o) => o.long === '--store' || o.long === '--link' || o.long === '--db');
  const covered = named.length > 0 ? named : takesStore ? Object.keys(config.stores) : [];
  if (!covered.some((s) => (config.stores[s]?.engine ?? 'sqlite') !== 'sqlite')) return; // nothing to load
  const { notOnEngineYet, storeOffEngines } = await import('../engines/registry.js');
  const off = storeOffEngines(config.stores, covered, ['sqlite']);
  if (off) throw notOnEngineYet(commandPath(cmd), off.store, off.engine);
}

/**
 * The options that name a store: `--store` (one, or repeated) and `--link` (serve's), on the command or a command
 * above it (a subcommand's option its parent also defines is parsed by the parent). `--db` names the store the
 * config has for that file (dbStoreIn).
 */
export const STORE_NAMING_OPTIONS = ['store', 'link'] as const;

function storesNamed(cmd: Command): string[] {
  const names: string[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) {
    const opts = c.opts<Record<string, unknown>>();
    for (const key of STORE_NAMING_OPTIONS) {
      const v = opts[key];
      for (const name of Array.isArray(v) ? v : [v]) if (typeof name === 'string') names.push(name);
    }
  }
  return names;
}

/**
 * Where the config says a store lives decides where a command on it runs. Every command comes through here, with
 * the stores it names (and a single-store command with the one it works on), before any store file is opened: a
 * store whose `host:` is another machine is refused, exit 2, naming that host, because the file at its path here
 * is not that store (another machine's store of the same path, or nothing); a command that runs on the store's
 * host through its queue (routedToStoreHost) gets that host instead. Returns the host of a store elsewhere, or null.
 */
async function storesHere(config: Config, cmd: Command, stores: string[], configFile: string | undefined): Promise<string | null> {
  if (!stores.some((s) => config.stores[s]?.host !== undefined)) return null; // no host named: all here, nothing to load
  const { storeElsewhere, thisHost } = await import('../queue/hosts.js');
  const away = stores.map((store) => ({ store, host: storeElsewhere(config, store) })).filter((s): s is { store: string; host: string } => s.host !== null);
  if (away.length === 0) return null;
  const here = thisHost(config);
  if (ROUTED.has(cmd)) return away[0]!.host;
  const what = away.map((s) => `store ${s.store} lives on host ${s.host}`).join(', ');
  throw usageError(`${commandPath(cmd)}: ${what}, and this machine is ${here}; the file at its path here is not that store: run it on ${[...new Set(away.map((s) => s.host))].join(', ')}${await enqueueHint(cmd, away[0]!.store, configFile)}`);
}

/** `run prune`: the words that name a command, below the program's own name. */
function commandPath(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command | null = cmd; c?.parent; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/**
 * For a job's command, the command that runs that job on the store's host from here (the digest: on every host),
 * with the config file this command was given.
 */
async function enqueueHint(cmd: Command, store: string, configFile: string | undefined): Promise<string> {
  const job = cmd.parent?.name() === 'run' ? cmd.name() : cmd.name() === 'check' ? 'integrity' : null;
  if (job === null) return '';
  const [{ shellPath, storeFlags }, { resolve }] = await Promise.all([import('../digest/untrusted.js'), import('node:path')]);
  const config = configFile !== undefined ? resolve(configFile) : undefined;
  if (JOB_SCOPES[job] === 'global') return ` (from here: memory-warden enqueue ${job}${config !== undefined ? ` --config ${shellPath(config)}` : ''})`;
  return ` (from here: memory-warden enqueue ${job} ${storeFlags(config !== undefined ? { config } : {}, store)})`;
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
  const held = await thisHostsFirst(config, Object.keys(config.stores).filter((name) => sameFile(db, expandHome(config.stores[name]!.db))), db);
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

/**
 * In a fleet, one path can be a store on each machine (`/srv/agent/memory.db` on box-a and on box-b): the file at
 * that path here is the store of this machine. Stores of other machines alone are refused, naming their hosts.
 */
async function thisHostsFirst(config: Config, held: string[], db: string): Promise<string[]> {
  if (held.length < 2 || held.every((s) => config.stores[s]!.host === undefined)) return held;
  const { hostOfStore, thisHost } = await import('../queue/hosts.js');
  const here = thisHost(config);
  const mine = held.filter((s) => hostOfStore(config, s) === here);
  if (mine.length > 0) return mine;
  const where = held.map((s) => `${s} on host ${hostOfStore(config, s)}`).join(', ');
  throw usageError(`--db ${db}: the config holds this path as stores of other machines (${where}), and this machine is ${here}; the file here is none of them: run the command on that host`);
}

/** What `read` returns, or undefined when it throws (loadConfig then says why, naming the file). */
function parsed(read: () => unknown): unknown {
  try {
    return read();
  } catch {
    return undefined;
  }
}

/** loadForCommand for a command that works on one store: that store's name with the rest. */
export async function storeContext(opts: StoreOptions, cmd: Command): Promise<CommandContext> {
  const { storeName, ...base } = await loadForCommand(opts, cmd, { oneStore: true });
  const ctx = { ...base, storeName: storeName! };
  // A folder (or a device …) as the store's file: named where it was given, before anything opens it. A store on
  // another host is not looked for here: its file is there, not at this path.
  const db = ctx.config.stores[ctx.storeName]?.db;
  if (db !== undefined && ctx.storeHost === null) {
    const { assertStorePath } = await import('../store/store-path.js');
    if (opts.db !== undefined) assertStorePath(opts.db, '--db', 'option');
    else {
      const file = opts.config ?? process.env.MEMORY_WARDEN_CONFIG;
      assertStorePath(db, `${file ? `config ${file}: ` : ''}stores.${ctx.storeName}.db`);
    }
  }
  return ctx;
}

/** How this command was told which store: its --config and --db, absolute (src/digest/untrusted.ts storeFlags). */
export async function storeNaming(opts: StoreOptions): Promise<StoreNaming> {
  const { resolve } = await import('node:path');
  return { ...(opts.config !== undefined ? { config: resolve(opts.config) } : {}), ...(opts.db !== undefined ? { db: resolve(opts.db) } : {}) };
}

/** The words that name the store in a command printed for a person to run next (restore's undo), as this command named it. */
export async function storeWords(opts: StoreOptions, storeName: string): Promise<string> {
  return (await import('../digest/untrusted.js')).storeFlags(await storeNaming(opts), storeName);
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
