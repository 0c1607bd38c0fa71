import { Command, CommanderError } from 'commander';
import { coerceError, usageError } from './core/errors.js';
import { LOG_LEVELS } from './log/levels.js';
import { oneLine, terminalText } from './text/untrusted.js';
import { VERSION } from './core/version.js';
import { redactText } from './text/secrets.js';
import { registerCoreCommands } from './commands/core.js';
import { registerEraseCommands } from './commands/erase.js';
import { registerDigestCommands } from './commands/digest.js';
import { registerFleetCommand, registerWorkerCommands } from './commands/worker.js';
import { registerSnapshotCommands } from './commands/snapshot.js';
import { registerTargetCommands } from './commands/targets.js';
import { registerReviewCommands } from './commands/review.js';
import { registerServeCommands } from './commands/serve.js';
import { endProgress } from './commands/common.js';
import { quietOnClosedPipe } from './core/closed-pipe.js';
import { addCommandDetails } from './commands/details.js';


export function buildProgram(): Command {
  const program = new WardenCommand('memory-warden')
    .description('keeps AI agents\' memory stores honest: prune, integrity, snapshots, digest, drift re-verification')
    .version(VERSION)
    .option('--pretty', 'human-readable logs (default when stderr is a terminal)')
    .option('--log-level <level>', LOG_LEVELS.join(', '))
    .exitOverride()
    .hook('preAction', (_program, action) => rejectEmptyOptions(action));
  registerCoreCommands(program);
  registerEraseCommands(program);
  registerDigestCommands(program);
  registerWorkerCommands(program);
  registerFleetCommand(program);
  registerSnapshotCommands(program);
  registerTargetCommands(program);
  registerReviewCommands(program);
  registerServeCommands(program);
  addCommandDetails(program);
  return program;
}

/**
 * Commander's own output: help, `--version`, and its usage errors, which quote argv (`error: unknown option
 * '-x…'`, `error: unknown command '…'`). argv is not ours: a word can hold an escape sequence, a bidi control or
 * a newline that forges a line. A usage error is one line, as main() writes its own errors (`memory-warden: …`),
 * ending with where the usage is (a script reading stderr gets the error, not forty lines of help); help and
 * version are our text and only get the last check every printed block gets (terminalText), so they read as they
 * always did.
 */
const COMMANDER_OUTPUT = {
  writeOut: (text: string) => process.stdout.write(terminalText(text)),
  writeErr: (text: string) => process.stderr.write(terminalText(text)),
};

/** `memory-warden review confirm`: the words that name a command, from the root. */
function commandPath(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/**
 * Every command of the tree is made here, with that output: `.command()` makes each subcommand through
 * createCommand, and commander's implicit `help` command (made only when help is asked for) too, which does not
 * inherit its parent's settings as a subcommand does.
 */
class WardenCommand extends Command {
  constructor(name?: string) {
    super(name);
    this.configureOutput(this.output());
  }

  /** A subcommand is given its parent's output settings when added: its errors name it, not the parent. */
  override copyInheritedSettings(source: Command): this {
    super.copyInheritedSettings(source);
    return this.configureOutput(this.output());
  }

  private output() {
    return {
      ...COMMANDER_OUTPUT,
      // Commander puts its own suggestion on a line of its own after the error ("\n(Did you mean check?)"): keep it
      // on the error's line. It closes the message; a newline from argv is inside the quotes before it.
      outputError: (text: string, write: (text: string) => void) => {
        const message = text.replace(/\n$/, '').replace(/^error: /, '').replace(/\n(\(Did you mean [^\n]*\?\))$/, ' $1');
        write(`memory-warden: ${errorLine(`${message} (${commandPath(this)} --help shows the usage)`)}\n`);
      },
    };
  }

  override createCommand(name?: string): Command {
    return new WardenCommand(name);
  }
}

/** Options whose values are memory ids: an agent can have written any text as an id, the empty one too. */
const VALUES_ARE_IDS = new Set(['ids']);

/**
 * An option given on the command line with nothing in it (`--now ""`, `--hash-password "$UNSET"`) is a usage
 * error, for every command and the global options alike. Read as "not given", it changed what ran: a prune or an
 * erase at `--now ""` ran as of this moment, `serve --hash-password ""` started the server, `--out ""` wrote no file.
 */
function rejectEmptyOptions(action: Command): void {
  for (let cmd: Command | null = action; cmd; cmd = cmd.parent) {
    for (const option of cmd.options) {
      const key = option.attributeName();
      if (cmd.getOptionValueSource(key) !== 'cli' || VALUES_ARE_IDS.has(key)) continue;
      const value: unknown = cmd.getOptionValue(key);
      if ((Array.isArray(value) ? value : [value]).some((v) => typeof v === 'string' && v.trim() === '')) {
        throw usageError(`${option.long ?? option.flags}: empty (give a value, or leave the option out)`);
      }
    }
  }
}

/** An error line longer than this (a library's message that quotes a whole document) is cut, with an ellipsis. */
const MAX_ERROR_CHARS = 2000;

/** Exit codes: 0 done, 1 ran and found problems (check), 2 could not run (usage, config, store, lock, service). */
export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      return err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help' ? 0 : 2;
    }
    const e = coerceError(err);
    endProgress();
    process.stderr.write(`memory-warden: ${errorLine(e.message)}\n`);
    return e.exitCode;
  }
}

/**
 * An error for stderr, ours or commander's: the whole message on one line (a name it quotes may hold a newline,
 * and cutting there left half a sentence), secrets redacted, every hidden character inert, a very long one cut.
 */
function errorLine(message: string): string {
  const line = oneLine(redactText(message));
  return line.length > MAX_ERROR_CHARS ? `${line.slice(0, MAX_ERROR_CHARS - 1)}…` : line;
}

/** The command line's whole run: src/cli.ts calls it, from the build's bundle or from these modules. */
export function run(argv: string[]): void {
  quietOnClosedPipe(process.stdout);
  quietOnClosedPipe(process.stderr);
  void main(argv).then((code) => {
    process.exitCode = code;
  });
}
