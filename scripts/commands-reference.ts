import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { buildProgram } from '../src/program.js';
import { commandsReferenceText } from '../src/commands/reference.js';

/** `npm run build` writes docs/commands.md from the command tree; a test checks the shipped page matches. */
const out = fileURLToPath(new URL('../../docs/commands.md', import.meta.url));
writeFileSync(out, commandsReferenceText(buildProgram()));
process.stdout.write(`wrote ${out}\n`);
