import { z } from '../vendor/zod.js';
import { configSchema } from './config.js';

/**
 * The JSON Schema of a config file, generated from the very zod schema that validates it (never written by hand):
 * shipped as config/schema.json for editors (`# yaml-language-server: $schema=…`). Input side: every field with
 * a default is optional, as in a user's file. Checks zod cannot express (refinements) are said with a `pattern`
 * in the field's meta where a pattern can say them; the rest are left to the real validation.
 */
export function configJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(configSchema, { io: 'input', unrepresentable: 'any', target: 'draft-2020-12' }) as Record<string, unknown>;
  return {
    $schema: schema.$schema,
    title: 'memory-warden config',
    description: 'A memory-warden config file: merged over config/default.yaml, ${VAR} expanded, then validated. Generated from src/config/config.ts by scripts/config-schema.ts.',
    ...Object.fromEntries(Object.entries(schema).filter(([k]) => k !== '$schema')),
  };
}

export const configJsonSchemaText = (): string => JSON.stringify(configJsonSchema(), null, 2) + '\n';
