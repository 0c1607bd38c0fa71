#!/usr/bin/env node
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { currentBundle, requireBundle } from './launch.js';

// The command line (src/program.ts), from the build's bundle when it is current (src/launch.ts), else as modules.
const bundle = process.env.MEMORY_WARDEN_BUNDLE === '0' ? undefined : currentBundle(dirname(fileURLToPath(import.meta.url)));
const program = bundle ? (requireBundle(bundle) as typeof import('./program.js')) : await import('./program.js');
program.run(process.argv);
