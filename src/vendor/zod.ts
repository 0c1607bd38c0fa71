/**
 * zod, as every module of this project imports it. `npm run build` replaces what tsc emits for this file with
 * zod bundled into one file (scripts/vendor.ts): loading modules is most of a command's start-up on Node 20, and
 * zod is 95 of them. Under test, and without the bundler, this is the package itself.
 *
 * Without its JIT: zod compiles a parser for each object schema (`new Function`) the first time it parses, which
 * pays off over thousands of parses. Here a schema parses once or a few times a run (the config, a job's payload),
 * and the compiling was ~20 ms of every `--config` start-up (measured in the history of BENCHMARKS.md); results are the same.
 */
import { config } from 'zod';

config({ jitless: true });

export * from 'zod';
