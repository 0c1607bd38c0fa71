import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { LAYOUTS, LAYOUTS_ON_POSTGRES } from '../src/layouts/registry.js';
import { ENGINES } from '../src/engines/registry.js';
import { VECTOR_FOLDERS, VECTOR_STORES } from '../src/vectors/registry.js';

/**
 * The import rules of .dependency-cruiser.cjs (no circle in src or jobs; a layout or vector store imports no
 * feature; src imports no job), checked on every `npm test`; and every implementation folder is registered, so
 * it runs the contract suites (test/layouts/contract.test.ts, test/vectors/contract.test.ts).
 */
const root = join(import.meta.dirname, '..');
const folders = (dir: string) => readdirSync(join(root, dir), { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name).sort();

describe('the import rules', () => {
  it('dependency-cruiser finds no violation in src and jobs', () => {
    const bin = join(root, 'node_modules/dependency-cruiser/bin/dependency-cruise.mjs');
    const out = execFileSync(process.execPath, [bin, '--config', '.dependency-cruiser.cjs', '--output-type', 'json', 'src', 'jobs'], { cwd: root, encoding: 'utf8', maxBuffer: 64 << 20 });
    const summary = JSON.parse(out).summary as { violations: { rule: { name: string }; from: string; to: string; cycle?: { name: string }[] }[]; totalCruised: number };
    const violations = summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}${v.cycle ? ` (${v.cycle.map((c) => c.name).join(' -> ')})` : ''}`);
    expect(violations).toEqual([]);
    expect(summary.totalCruised).toBeGreaterThan(100); // it really read the tree
  }, 120_000);
});

describe('the registries', () => {
  it('every folder under src/layouts/ is a registered layout', () => {
    expect(folders('src/layouts')).toEqual(Object.keys(LAYOUTS).sort());
  });

  it('every folder under src/vectors/ is a registered vector store', () => {
    expect(folders('src/vectors')).toEqual(Object.values(VECTOR_FOLDERS).sort());
    expect(Object.keys(VECTOR_FOLDERS).sort()).toEqual(Object.keys(VECTOR_STORES).sort());
  });

  it('every folder under src/engines/ is a registered engine, and each layout on PostgreSQL has its folder', () => {
    expect(folders('src/engines')).toEqual(Object.keys(ENGINES).sort());
    for (const layout of Object.keys(LAYOUTS_ON_POSTGRES)) expect(folders(`src/layouts/${layout}`)).toContain('postgres');
  });

  it('each layout is registered under its own name', () => {
    for (const [name, layout] of Object.entries(LAYOUTS)) expect(layout.name).toBe(name);
  });
});
