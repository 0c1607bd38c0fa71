import { describe, expect, it } from 'vitest';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { JOBS } from '../../jobs/index.js';

describe('job registry', () => {
  it('lists every job file under its file name', () => {
    const dir = fileURLToPath(new URL('../../jobs/', import.meta.url));
    const files = readdirSync(dir).filter((f) => f.endsWith('.ts') && f !== 'index.ts').map((f) => f.replace(/\.ts$/, ''));
    expect(Object.keys(JOBS).sort()).toEqual(files.sort());
    for (const [name, job] of Object.entries(JOBS)) expect(job.name).toBe(name);
  });
});
