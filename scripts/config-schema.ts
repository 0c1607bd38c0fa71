import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { configJsonSchemaText } from '../src/config/json-schema.js';
import { DEFAULT_CONFIG_PATH } from '../src/config/config.js';

/** `npm run build` writes config/schema.json from the validation schema; a test checks the shipped file matches. */
const out = join(dirname(DEFAULT_CONFIG_PATH), 'schema.json');
writeFileSync(out, configJsonSchemaText());
process.stdout.write(`wrote ${out}\n`);
