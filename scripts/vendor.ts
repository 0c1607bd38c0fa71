/**
 * `npm run build`, after tsc: zod and yaml, each bundled into one file in place of the re-export tsc emitted for
 * src/vendor/. Loading modules is most of a command's start-up on Node 20 (no compile cache): zod is 95 files and
 * yaml 72, about 20 and 15 ms of every `memory-warden … --config FILE` (BENCHMARKS.md, "Issue 13: fourth session").
 * The bundle is the package's own code, unchanged; without the bundler (a production install) the re-exports
 * stay, and everything works as before, only slower to start.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const VENDOR = fileURLToPath(new URL('../src/vendor/', import.meta.url));

const BUNDLES = [
  // src/vendor/zod.ts as tsc emitted it (zod, and its set-up), as an ES module.
  { file: 'zod.js', entry: readFileSync(`${VENDOR}zod.js`, 'utf8').replace(/^\/\/# sourceMappingURL=.*$/m, ''), format: 'esm' },
  // What src/vendor/yaml.cjs re-exports, as CommonJS: config-read.ts requires it only when a YAML file is parsed.
  { file: 'yaml.cjs', entry: `module.exports = require('yaml');`, format: 'cjs' },
] as const;

async function main(): Promise<void> {
  let build: typeof import('rolldown').build;
  try {
    ({ build } = await import('rolldown'));
  } catch {
    writeFileSync(`${VENDOR}yaml.cjs`, `module.exports = require('yaml');\n`);
    console.log('vendor: no bundler here (dev dependency rolldown): zod and yaml load from node_modules');
    return;
  }
  for (const b of BUNDLES) {
    await build({
      input: 'vendor-entry',
      platform: 'node',
      logLevel: 'warn',
      plugins: [{ name: 'entry', resolveId: (id) => (id === 'vendor-entry' ? id : null), load: (id) => (id === 'vendor-entry' ? b.entry : null) }],
      output: { file: `${VENDOR}${b.file}`, format: b.format },
    });
    rmSync(`${VENDOR}${b.file}.map`, { force: true }); // tsc's map of the re-export, not of this file
  }
  console.log(`vendor: wrote ${BUNDLES.map((b) => `dist/src/vendor/${b.file}`).join(', ')}`);
}

await main();
