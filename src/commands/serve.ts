import type { Command } from 'commander';
import { resolve } from 'node:path';
import { usageError } from '../core/errors.js';
import { loadForCommand, onAnyEngine, print, type StoreOptions } from './common.js';

/** `serve`: the review page; `--link` prints a signed link to it, `--hash-password` a line for the users file. */
export function registerServeCommands(program: Command): void {
  // Every engine: each request reaches its store through the engine (src/review-web/decide.ts).
  onAnyEngine(program.command('serve'))
    .description('serve the review page (loopback by default; docs/digest-and-review.md#the-review-page)')
    .option('--config <file>', 'config file (YAML)')
    .option('--link <store>', 'print a signed link that opens this store\'s review page, and exit')
    .option('--hash-password <name>', 'read a password from standard input and print a users-file line for it, and exit')
    .option('--now <time>', 'as of this ISO-8601 time')
    .action(async (opts: StoreOptions & { link?: string; hashPassword?: string }, cmd: Command) => {
      if (opts.hashPassword) {
        const { hashPasswordLine, passwordProblem } = await import('../review-web/auth.js');
        return print`${hashPasswordLine(opts.hashPassword, await readPassword(passwordProblem))}`;
      }
      const { config, log, now } = await loadForCommand(opts, cmd);
      if (opts.link) {
        const [{ selectStore }, { reviewKey }, { reviewLink }] = await Promise.all([
          import('../config/config.js'), import('../links/tokens.js'), import('../digest/review-links.js'),
        ]);
        const store = selectStore(config, opts.link).name;
        const { host, port } = config.review.listen;
        const withUrl = config.review.url ? config : { ...config, review: { ...config.review, url: `http://${host.includes(':') ? `[${host}]` : host}:${port}` } };
        return print`${reviewLink(withUrl, reviewKey(config.review.secretEnv), store, '*', now())}`;
      }
      // Loaded only here: the web framework is no cost to every other command's start.
      const { startReviewServer } = await import('../review-web/server.js');
      const server = await startReviewServer({ config, log, now });
      print`review page at ${server.url}${config.review.url ? ` (readers reach it as ${config.review.url})` : ''}`;
      // The page opens only from a signed link; without review.url the digest carries commands, not links.
      const withConfig = opts.config !== undefined ? ` --config ${(await import('../digest/untrusted.js')).shellPath(resolve(opts.config))}` : '';
      if (!config.review.url) print`  it opens from a signed link (review.url is not set, so the digest has none): memory-warden serve --link STORE${withConfig} prints one`;
      await new Promise<void>((resolve) => {
        const stop = () => void server.close().then(resolve);
        process.once('SIGTERM', stop);
        process.once('SIGINT', stop);
      });
    });
}

async function readPassword(problem: (password: string) => string | undefined): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  const password = Buffer.concat(chunks).toString('utf8').split(/\r?\n/)[0] ?? '';
  const weak = problem(password);
  if (weak) throw usageError(`serve --hash-password: the password on standard input ${weak}; give one of at least 8 characters`);
  return password;
}
