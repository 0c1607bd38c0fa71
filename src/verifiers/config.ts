import { z } from '../vendor/zod.js';
import { timerDuration } from '../time/timer-duration.js';
import { pathField } from '../config/path-field.js';
import { VERIFIER_NAME } from './define.js';

/** A regular expression written in config: it must compile (named groups become template variables). */
const regex = z.string().min(1).superRefine((text, ctx) => {
  try {
    new RegExp(text);
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: `not a valid regular expression: ${(err as Error).message}` });
  }
});

/**
 * One rule: which memories (by source, optionally subject and fact) a verifier checks, and how. `${name}` in `with` and
 * `replacement` is a named group of `match`, `${value}` (replacement only) what the verifier read, and any other
 * `${NAME}` an environment variable — expanded when the rules are compiled (src/verifiers/rules.ts), never from
 * memory text.
 */
export const ruleSchema = z
  .strictObject({
    name: z.string().min(1).optional().describe('Shown in logs and records; default `rule N`.'),
    match: z.strictObject({
      source: regex
        .describe('A regular expression the memory\'s source must match; its named groups fill `${name}` in `with` and `replacement`.'),
      subject: regex.optional().describe('A regular expression the memory\'s subject must also match (optional).'),
      fact: regex.optional()
        .describe('A regular expression the memory\'s fact must also match: what the memory claims. Its named groups fill `${name}` like the others (`expect: "^${version}"`). A rule whose `expect` takes nothing from the memory needs it.'),
    }),
    use: z.string().regex(VERIFIER_NAME, 'a verifier name (lower case letters, digits, -)')
      .describe('The verifier: file, git, http or a plugin\'s name.'),
    with: z.record(z.string(), z.unknown()).default({})
      .describe('The verifier\'s parameters, plus `expect` (regex string, literal, `{ equals }` or `{ matches }`) judged by the core.'),
    autoSupersede: z.boolean().default(false)
      .describe('Insert the replacement and supersede the old row without asking a person. Needs `replacement`.'),
    replacement: z
      .union([z.string().min(1), z.strictObject({
        fact: z.string().min(1).describe('The corrected fact (a template).'),
        source: z.string().min(1).optional().describe('Its source (a template); default `drift:<verifier>:<old source>`.'),
      })])
      .optional()
      .describe('The corrected fact (template), or `{ fact, source }`; the source defaults to `drift:<verifier>:<old source>`.'),
    timeoutMs: timerDuration('ms').int().positive().optional().describe('Overrides `verify.timeoutMs` for this rule.'),
  })
  .superRefine((rule, ctx) => {
    if (rule.autoSupersede && !rule.replacement) {
      ctx.addIssue({ code: 'custom', path: ['autoSupersede'], message: 'autoSupersede needs a replacement template' });
    }
  });

export const allowSchema = z.strictObject({
  fileRoots: z.array(pathField()).default([])
    .describe('Folders the file verifier (and plugins through ctx.readFile) may read under; symlinks may not leave them.'),
  gitRepos: z.array(pathField()).default([])
    .describe('Repositories the git verifier may clone: local paths or URLs, compared exactly.'),
  httpHosts: z.array(z.string().min(1).regex(/^[^\s/@]+$/, 'a host or host:port, no scheme or path')).default([])
    .describe('Hosts the http verifier may GET: `host` (any port) or `host:port`.'),
});

export const verifySchema = z.strictObject({
  plugins: z.array(pathField()).default([])
    .describe('Verifier plugin modules to load at start (paths relative to the config file).'),
  rules: z.array(ruleSchema).default([])
    .describe('Which memories (by source, optionally subject) a verifier checks, and how; the first rule that matches wins, a row no rule matches goes to a person.'),
  concurrency: z.number().int().min(1).max(64).default(4).describe('Verifications running at the same time.'),
  timeoutMs: timerDuration('ms').int().positive().default(30_000)
    .describe('Per verification; past it the verdict is `unverifiable` (retried next run) and the others carry on.'),
  cacheDir: pathField().default('~/.cache/memory-warden')
    .describe('Cached clones of the git verifier; `~` is the home folder.'),
  allow: allowSchema.prefault({}),
});

export type VerifyConfig = z.infer<typeof verifySchema>;
export type RuleConfig = z.infer<typeof ruleSchema>;

/** The paths in this section that are relative to the config file they are written in (called by loadConfig). */
export function resolveVerifyPaths(verify: unknown, abs: (p: unknown) => unknown): unknown {
  if (typeof verify !== 'object' || verify === null || Array.isArray(verify)) return verify;
  const v = { ...(verify as Record<string, unknown>) };
  if (Array.isArray(v.plugins)) v.plugins = v.plugins.map(abs);
  if (v.cacheDir !== undefined) v.cacheDir = abs(v.cacheDir);
  const allow = v.allow;
  if (typeof allow === 'object' && allow !== null && !Array.isArray(allow)) {
    const a = { ...(allow as Record<string, unknown>) };
    if (Array.isArray(a.fileRoots)) a.fileRoots = a.fileRoots.map(abs);
    // Local repositories only: a URL (scheme://, user@host:path) is left as written.
    if (Array.isArray(a.gitRepos)) a.gitRepos = a.gitRepos.map((r) => (typeof r === 'string' && /^[a-z][a-z0-9+.-]*:\/\/|^[^/]+@[^/]+:/i.test(r) ? r : abs(r)));
    v.allow = a;
  }
  return v;
}

/** `verify.rules` is expanded by the rule compiler, not by loadConfig: `${group}` there is not an env variable. */
export { RULES_CONFIG_PATH } from '../config/read.js';
