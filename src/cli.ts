#!/usr/bin/env node
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { currentBundle } from './launch.js';

// The command line (src/program.ts), from the build's bundle when it is current (src/launch.ts), else as modules.
const bundle = process.env.MEMORY_WARDEN_BUNDLE === '0' ? undefined : currentBundle(dirname(fileURLToPath(import.meta.url)));
const program = bundle ? (createRequire(import.meta.url)(bundle) as typeof import('./program.js')) : await import('./program.js');
program.run(process.argv);
