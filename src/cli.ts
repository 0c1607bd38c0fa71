#!/usr/bin/env node
import module from 'node:module';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

// Node 22.1+ keeps V8's code for every module its loader compiles (the bundle's chunks, this file's imports, a plugin,
// the packages the bundle leaves out) in a cache on disk, so that the next start skips compiling them: in os.tmpdir()
// unless NODE_COMPILE_CACHE says where, off with NODE_DISABLE_COMPILE_CACHE=1. Node 20 has no such cache and compiles
// everything at every start. Enabled before the imports below, which it then covers.
(module as { enableCompileCache?: () => unknown }).enableCompileCache?.();
// The AWS SDK prints a multi-line notice on every start under a Node it will stop supporting (Node 20); which Node
// lines memory-warden supports is its own statement (package.json engines, the README), not a dependency's.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

// The command line (src/program.ts), from the build's bundle when it is current (src/launch.ts), else as modules.
const { currentBundle, requireBundle } = await import('./launch.js');
const bundle = process.env.MEMORY_WARDEN_BUNDLE === '0' ? undefined : currentBundle(dirname(fileURLToPath(import.meta.url)));
const program = bundle ? (requireBundle(bundle) as typeof import('./program.js')) : await import('./program.js');
program.run(process.argv);
