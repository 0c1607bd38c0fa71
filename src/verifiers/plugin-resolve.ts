import module from 'node:module';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/**
 * A plugin imports memory-warden by its name (`import { defineVerifier } from 'memory-warden'`) wherever its file
 * lives: /etc/memory-warden/plugins/x.mjs has no node_modules above it, and Node's own lookup would not find the
 * package. While memory-warden loads plugins, that name resolves to the package that is running, whose contract
 * (define.ts, types.ts) is the one the plugin is checked against; any other name resolves as Node resolves it from
 * the plugin's folder (a node_modules beside it). A module hook of Node's, as its documentation describes:
 * `module.registerHooks` (in this thread) where Node has it (22.15+), else `module.register` (Node 20.6+), which
 * loads this module's own file (dist/src/verifiers/plugin-resolve.js) in the loader's thread and takes its `resolve`.
 * Paths are found from the package root, not from this file: the CLI may run this code from its bundle's chunk.
 */

export const PACKAGE_NAME = 'memory-warden';

let root: string | undefined;

/** The folder of memory-warden's package.json, above this module (dist/src/verifiers/) or its chunk (dist/src/). */
function packageRoot(): string {
  if (root !== undefined) return root;
  for (let d = dirname(fileURLToPath(import.meta.url)); ; d = dirname(d)) {
    const pkg = join(d, 'package.json');
    if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, 'utf8')) as { name?: unknown }).name === PACKAGE_NAME) return (root = d);
    if (dirname(d) === d) throw new Error(`${PACKAGE_NAME}: no package.json of its own above ${fileURLToPath(import.meta.url)}`);
  }
}

interface ResolveResult {
  url: string;
  format?: string | null;
  shortCircuit?: boolean;
}
type NextResolve = (specifier: string, context?: unknown) => ResolveResult | Promise<ResolveResult>;

/** The hook: `memory-warden` is this package's entry (`exports["."]`); everything else is Node's business. */
export function resolve(specifier: string, context: unknown, nextResolve: NextResolve): ResolveResult | Promise<ResolveResult> {
  if (specifier === PACKAGE_NAME) return { url: pathToFileURL(join(packageRoot(), 'dist/src/index.js')).href, format: 'module', shortCircuit: true };
  return nextResolve(specifier, context);
}

let installed = false;

/** Installs the hook once per process, before the first plugin is imported. */
export function resolvePackageForPlugins(): void {
  if (installed) return;
  installed = true;
  const hooks = module as unknown as {
    registerHooks?: (hooks: { resolve: typeof resolve }) => unknown;
    register: (specifier: string) => void;
  };
  if (hooks.registerHooks) hooks.registerHooks({ resolve });
  else hooks.register(pathToFileURL(join(packageRoot(), 'dist/src/verifiers/plugin-resolve.js')).href);
}
