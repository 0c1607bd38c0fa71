import { Command, CommanderError } from 'commander';
import { coerceError } from './errors.js';
import { oneLine } from './untrusted.js';
import { VERSION } from './version.js';
import { redactText } from './secrets.js';
import { registerCoreCommands } from './commands/core.js';
import { registerEraseCommands } from './commands/erase.js';
import { registerDigestCommands } from './commands/digest.js';
import { registerFleetCommand, registerWorkerCommands } from './commands/worker.js';
import { registerSnapshotCommands } from './commands/snapshot.js';
import { registerTargetCommands } from './commands/targets.js';
import { registerReviewCommands } from './commands/review.js';
import { registerServeCommands } from './commands/serve.js';
import { endProgress } from './commands/common.js';


export function buildProgram(): Command {
  const program = new Command('memory-warden')
    .description('keeps AI agents\' memory stores honest: prune, integrity, snapshots, digest, drift re-verification')
    .version(VERSION)
    .option('--pretty', 'human-readable logs (default when stderr is a terminal)')
    .option('--log-level <level>', 'trace, debug, info, warn, error, silent')
    .showHelpAfterError()
    .exitOverride();
  registerCoreCommands(program);
  registerEraseCommands(program);
  registerDigestCommands(program);
  registerWorkerCommands(program);
  registerFleetCommand(program);
  registerSnapshotCommands(program);
  registerTargetCommands(program);
  registerReviewCommands(program);
  registerServeCommands(program);
  return program;
}

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
    process.stderr.write(`memory-warden: ${oneLine(redactText(e.message.split('\n')[0]!))}\n`);
    return e.exitCode;
  }
}

/** The command line's whole run: src/cli.ts calls it, from the build's bundle or from these modules. */
export function run(argv: string[]): void {
  void main(argv).then((code) => {
    process.exitCode = code;
  });
}
