import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { configReferenceText } from '../src/config/reference.js';

/** `npm run build` writes docs/config-reference.md from the validation schema; a test checks the shipped page matches. */
const out = fileURLToPath(new URL('../../docs/config-reference.md', import.meta.url));
writeFileSync(out, configReferenceText());
process.stdout.write(`wrote ${out}\n`);
