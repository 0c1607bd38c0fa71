import type { Command } from 'commander';
import { loadConfig, selectStore, type Config } from '../config.js';
import { createLogger, type Logger } from '../logger.js';
import { storeNameForPath } from '../layouts/open.js';
import { parseInstant, systemClock, type Clock } from '../time.js';
import { usageError } from '../errors.js';
import { escapedLine, jsonText, terminalText } from '../untrusted.js';

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
}

/** The global options live on the root program; read them from any subcommand. */
export function globalOptions(cmd: Command): { pretty?: boolean; logLevel?: string } {
  let root = cmd;
  while (root.parent) root = root.parent;
  return root.opts();
}

/** `--db PATH` becomes a store of its own, named after the file, layered over whatever config was given. */
export function loadForCommand(opts: StoreOptions, cmd: Command): { config: Config; log: Logger; now: Clock } {
  const overrides = opts.db ? { stores: { [storeNameForPath(opts.db)]: { db: opts.db } } } : undefined;
  const config = loadConfig({ file: opts.config ?? process.env.MEMORY_WARDEN_CONFIG, overrides });
  const g = globalOptions(cmd);
  const log = createLogger({ level: g.logLevel ?? process.env.LOG_LEVEL ?? config.log.level, ...(g.pretty ? { pretty: true } : {}) });
  return { config, log, now: clockFrom(opts.now) };
}

export function storeContext(opts: StoreOptions, cmd: Command): CommandContext {
  const base = loadForCommand(opts, cmd);
  const storeName = opts.db ? storeNameForPath(opts.db) : selectStore(base.config, opts.store).name;
  return { ...base, storeName };
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
 * Every human-readable line goes out through here: whatever store text it holds, no escape sequence, CR, C1
 * control or bidi override reaches the terminal (each becomes �). Store text in a line should also be `show`n,
 * so that its newlines cannot forge lines of their own.
 */
export function print(line = ''): void {
  process.stdout.write(terminalText(line) + '\n');
}

/** Store text for one human-readable line: one line, every hidden character named as `\uXXXX` (../untrusted.ts). */
export const show = (text: unknown): string => escapedLine(text);
