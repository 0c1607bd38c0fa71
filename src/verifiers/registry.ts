import { configError } from '../core/errors.js';
import type { Verifier } from './types.js';
import file from './file.js';
import git from './git.js';
import http from './http.js';

/**
 * The built-in verifiers, by name. Explicit on purpose: test/verifiers/registry.test.ts fails when a verifier
 * module in src/verifiers is missing here.
 */
export const BUILTIN_VERIFIERS: Readonly<Record<string, Verifier<any>>> = {
  file,
  git,
  http,
};

export type VerifierRegistry = ReadonlyMap<string, Verifier<any>>;

/** Built-ins plus loaded plugins; a plugin may not take a name already in use. */
export function createRegistry(plugins: ReadonlyArray<{ file: string; verifier: Verifier<any> }> = []): VerifierRegistry {
  const map = new Map<string, Verifier<any>>(Object.entries(BUILTIN_VERIFIERS));
  const from = new Map<string, string>();
  for (const { file, verifier } of plugins) {
    if (map.has(verifier.name)) {
      const other = from.get(verifier.name);
      throw configError(`verify plugin ${file}: a verifier named "${verifier.name}" is already ${other ? `loaded from ${other}` : 'built in'}`);
    }
    map.set(verifier.name, verifier);
    from.set(verifier.name, file);
  }
  return map;
}
