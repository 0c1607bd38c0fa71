import { z } from '../vendor/zod.js';
import { defineVerifier } from './define.js';
import { FORMATS, formatOf, parseContent } from './formats.js';
import { select } from './select.js';

const params = z.strictObject({
  /** Absolute, or relative to the first of verify.allow.fileRoots; must stay under a root. */
  path: z.string().min(1),
  /** Default: from the file name (.json, .yaml/.yml, .toml, .env), else text. */
  format: z.enum(FORMATS).optional(),
  /** `$.database.version`; without it the whole parsed content is the value. */
  select: z.string().min(1).optional(),
});

/** A value in a JSON, YAML, TOML or .env file under the allowed roots. */
export default defineVerifier<z.infer<typeof params>>({
  name: 'file',
  description: 'a value in a JSON, YAML, TOML or .env file under verify.allow.fileRoots',
  params,
  async verify({ params: p }, ctx) {
    const real = await ctx.resolveFile(p.path);
    // Checked first, so that every memory naming the same file shares one read; read through one descriptor.
    const text = await ctx.once(`file:${real}`, async () => (await ctx.readFile(real)).text);
    const format = p.format ?? formatOf(real);
    let parsed: unknown;
    try {
      parsed = parseContent(text, format);
    } catch (err) {
      return { verdict: 'unverifiable', reason: `${real}: not valid ${format}: ${(err as Error).message.split('\n')[0]}` };
    }
    const value = p.select ? select(parsed, p.select) : parsed;
    if (value === undefined) return { verdict: 'unverifiable', reason: `${real}: nothing at ${p.select}` };
    return { value, evidence: { path: real, format, ...(p.select ? { select: p.select } : {}) } };
  },
});
