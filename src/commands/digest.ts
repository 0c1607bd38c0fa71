import { Command } from 'commander';
import { loadForCommand, onAnyEngine, printJson, type StoreOptions } from './common.js';
import type { DigestResult } from '../digest/digest.js';
import { usageError } from '../core/errors.js';
import { unwritableFile } from '../core/read-file.js';
import { terminalText } from '../text/untrusted.js';

interface DigestOptions extends StoreOptions {
  preview?: boolean;
  send?: boolean;
  out?: string;
  only?: string[];
}

const collect = (value: string, previous: string[] = []) => [...previous, value];

/** `digest --preview [--out FILE.html]` renders without sending; `digest --send` is `run digest`. */
export function registerDigestCommands(program: Command): void {
  // Every engine: the digest reads each store through its engine (src/digest/collect.ts).
  onAnyEngine(program.command('digest'))
    .description('the daily digest email: --preview renders it (text to stdout, HTML to --out), --send sends it once per day')
    .option('--config <file>', 'config file (YAML)')
    .option('--db <path>', 'a SQLite store to preview, without a config file')
    .option('--store <name>', 'only this store (repeat for several); default every configured store', collect)
    .option('--preview', 'render without sending or recording anything')
    .option('--out <file>', 'with --preview: write the HTML part to this file')
    .option('--send', 'send it now (once per day per recipient list: a second --send the same day sends nothing)')
    .option('--now <time>', 'as if it were this ISO-8601 time')
    .option('--json', 'print one JSON object')
    .action(async (opts: DigestOptions, cmd: Command) => {
      if (opts.preview === opts.send) throw usageError('digest: choose one of --preview or --send');
      if (opts.out && !opts.preview) throw usageError('digest: --out goes with --preview');
      // Before any work: a digest rendered for a folder, a pipe or a device would be lost (or wait for a reader).
      const unwritable = opts.out ? unwritableFile(opts.out) : null;
      if (unwritable) throw usageError(`digest --out ${opts.out}: ${unwritable}`);
      const stores = (opts.store as unknown as string[] | undefined) ?? [];
      // A spare store thread for the review queue's scan (src/layouts/warden/queue.ts), starting while config loads.
      // Imported here, not at the top: --help loads no SQLite (test/cli-startup.test.ts).
      void import('../store/thread.js').then((m) => m.warmStoreThread(), () => {});
      const { config, log, now } = await loadForCommand({ ...opts, store: undefined }, cmd);
      const chosen = stores.length > 0 ? stores : undefined;
      if (opts.preview) {
        const { previewDigest } = await import('../digest/digest.js');
        const preview = await previewDigest(config, { now: now(), log, ...(chosen ? { stores: chosen } : {}), ...(opts.out ? { out: opts.out } : {}) });
        if (opts.json) return printJson({ subject: preview.subject, model: preview.model, ...(opts.out ? { out: opts.out } : {}) });
        process.stdout.write(terminalText(`Subject: ${preview.subject}\n\n${preview.text}`));
        if (opts.out) log.info({ out: opts.out }, 'digest HTML written');
        return;
      }
      const [{ runJob }, { loadJob }] = await Promise.all([import('../job/runner.js'), import('./job-loaders.js')]);
      const result = (await runJob('digest', chosen ? { stores: chosen } : {}, { jobs: loadJob, config, log, now })) as DigestResult;
      if (opts.json) return printJson(result);
      (await import('./run-output.js')).printDigest(result);
    });
}
