import { z } from '../vendor/zod.js';
import { configSchema } from './config.js';
import { SECRET_FIELDS, WHOLE_ENV_REF } from '../snapshot/targets/config.js';

/**
 * The JSON Schema of a config file, generated from the very zod schema that validates it (never written by hand):
 * shipped as config/schema.json for editors (`# yaml-language-server: $schema=…`). Input side: every field with
 * a default is optional, as in a user's file. Checks zod cannot express (refinements) are said with a `pattern`
 * in the field's meta where a pattern can say them; the rest are left to the real validation.
 */
export function configJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(configSchema, { io: 'input', unrepresentable: 'any', target: 'draft-2020-12' }) as Record<string, unknown>;
  credentialsAsReferences(schema);
  return {
    $schema: schema.$schema,
    title: 'memory-warden config',
    description: 'A memory-warden config file: merged over config/default.yaml, ${VAR} expanded, then validated. Generated from src/config/config.ts by scripts/config-schema.ts.',
    ...Object.fromEntries(Object.entries(schema).filter(([k]) => k !== '$schema')),
  };
}

export const configJsonSchemaText = (): string => JSON.stringify(configJsonSchema(), null, 2) + '\n';

/**
 * A target's credentials are `${VAR}` references in the file (checkTargetSecrets refuses a literal one before
 * anything is expanded); the zod schema validates the expanded value, so the file's rule is added here.
 */
function credentialsAsReferences(schema: Record<string, unknown>): void {
  type Node = { properties?: Record<string, Record<string, unknown>>; items?: { oneOf?: Node[] } };
  const snapshot = (schema as Node).properties?.snapshot as Node | undefined;
  const kinds = (snapshot?.properties?.targets as Node | undefined)?.items?.oneOf;
  if (!kinds) throw new Error('config JSON Schema: snapshot.targets is not where credentialsAsReferences looks');
  for (const kind of kinds) {
    for (const field of SECRET_FIELDS) {
      const property = kind.properties?.[field];
      if (property) Object.assign(property, { pattern: WHOLE_ENV_REF.source, description: 'a ${VAR} reference: the credential itself goes in the environment' });
    }
  }
}
