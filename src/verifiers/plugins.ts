import { existsSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { configError } from '../core/errors.js';
import { isDefinedVerifier, verifierProblem } from './define.js';
import { resolvePackageForPlugins } from './plugin-resolve.js';
import type { Verifier } from './types.js';

export interface LoadedPlugin {
  file: string;
  verifier: Verifier<any>;
}

/**
 * Import each plugin module listed in `verify.plugins` (absolute after config loading; relative ones against
 * `cwd`). Its default export must come from `defineVerifier`. Anything wrong is one config error naming the file.
 * A plugin may live anywhere the process can read: its `import ... from 'memory-warden'` is this package
 * (plugin-resolve.ts), the other packages it imports are found from its own folder.
 */
export async function loadPlugins(files: readonly string[], cwd = process.cwd()): Promise<LoadedPlugin[]> {
  const out: LoadedPlugin[] = [];
  if (files.length > 0) resolvePackageForPlugins();
  for (const given of files) {
    const file = isAbsolute(given) ? given : resolve(cwd, given);
    if (!existsSync(file)) throw configError(`verify plugin ${file}: no such file`);
    let mod: { default?: unknown };
    try {
      mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
    } catch (err) {
      throw configError(`verify plugin ${file}: cannot load: ${(err as Error).message?.split('\n')[0] ?? String(err)}`);
    }
    const candidate = mod.default;
    if (candidate === undefined) throw configError(`verify plugin ${file}: no default export (export default defineVerifier({...}))`);
    if (!isDefinedVerifier(candidate)) {
      const problem = verifierProblem(candidate);
      throw configError(`verify plugin ${file}: the default export is not made with defineVerifier${problem ? ` (${problem})` : ''}`);
    }
    out.push({ file, verifier: candidate as Verifier<any> });
  }
  return out;
}
