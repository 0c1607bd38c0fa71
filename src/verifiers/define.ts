import type { Verifier } from './types.js';

/** Shared through the global symbol registry: a plugin importing another copy of the package still passes. */
const BRAND = Symbol.for('memory-warden.verifier');

export const VERIFIER_NAME = /^[a-z][a-z0-9-]{0,39}$/;

/** Why `value` is not a verifier, or null when it is one. */
export function verifierProblem(value: unknown): string | null {
  if (typeof value !== 'object' || value === null) return 'not an object';
  const v = value as Partial<Verifier>;
  if (typeof v.name !== 'string' || !VERIFIER_NAME.test(v.name)) {
    return `name must be lower case letters, digits and "-" (got ${JSON.stringify(v.name)})`;
  }
  if (typeof v.verify !== 'function') return `verifier "${v.name}": verify must be a function`;
  if (v.params !== undefined && typeof (v.params as { safeParse?: unknown }).safeParse !== 'function') {
    return `verifier "${v.name}": params must be a schema with safeParse (a zod schema)`;
  }
  return null;
}

/**
 * What a plugin's default export is made with:
 *
 * ```ts
 * import { defineVerifier } from 'memory-warden';
 * export default defineVerifier({ name: 'lockfile', async verify(task, ctx) { return { value: '...' }; } });
 * ```
 *
 * Checks the definition at import time, so a broken plugin fails when it is loaded, not on its first memory.
 */
export function defineVerifier<P = Record<string, unknown>>(verifier: Verifier<P>): Verifier<P> {
  const problem = verifierProblem(verifier);
  if (problem) throw new TypeError(`defineVerifier: ${problem}`);
  return Object.defineProperty({ ...verifier }, BRAND, { value: true, enumerable: false }) as Verifier<P>;
}

export function isDefinedVerifier(value: unknown): value is Verifier<unknown> {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true && verifierProblem(value) === null;
}
