import { describe, expect, it } from 'vitest';
import { readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { BUILTIN_VERIFIERS } from '../../src/verifiers/registry.js';
import { isDefinedVerifier } from '../../src/verifiers/define.js';

const DIR = resolve(import.meta.dirname, '../../src/verifiers');

describe('verifier registry', () => {
  it('lists every verifier module of src/verifiers under its own name', async () => {
    const found: string[] = [];
    for (const file of readdirSync(DIR).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))) {
      const mod = (await import(pathToFileURL(join(DIR, file)).href)) as { default?: unknown };
      if (isDefinedVerifier(mod.default)) {
        const name = file.replace(/\.ts$/, '');
        found.push(name);
        expect(mod.default.name, `${file} exports verifier "${mod.default.name}"`).toBe(name);
        expect(BUILTIN_VERIFIERS[name], `${file} is missing from BUILTIN_VERIFIERS`).toBe(mod.default);
      }
    }
    expect(found.sort()).toEqual(Object.keys(BUILTIN_VERIFIERS).sort());
    expect(found).toEqual(expect.arrayContaining(['file', 'git', 'http']));
  });
});
