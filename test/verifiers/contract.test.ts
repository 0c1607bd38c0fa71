import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyAll } from '../../src/drift/dispatch.js';
import { silentLogger } from '../../src/log/logger.js';
import { verifySchema } from '../../src/verifiers/config.js';
import { BUILTIN_VERIFIERS, createRegistry } from '../../src/verifiers/registry.js';
import { compileRules } from '../../src/verifiers/rules.js';
import type { MemoryUnderReview, Verifier } from '../../src/verifiers/types.js';
import packageManager from '../../examples/verifier-package-manager/index.mjs';
import { sh } from '../helpers/git.js';
import { NOW, daysAgo } from '../drift/helpers.js';

/**
 * The verifier contract, which every verifier passes: built in or a plugin. Each case is the verifier used as its
 * documentation says, on a source and three memories about it: one the source agrees with, one it contradicts, one
 * the rule cannot judge. A memory contradicted by its evidence is never `confirmed`: evidence existing confirms
 * nothing, agreeing with what the memory claims does.
 */
interface Case {
  verifier: Verifier<any>;
  /** verify.allow and the rule, as a user writes them. */
  allow: Record<string, unknown>;
  rule: Record<string, unknown>;
  source: string;
  agrees: Pick<MemoryUnderReview, 'subject' | 'fact'>;
  contradicted: Pick<MemoryUnderReview, 'subject' | 'fact'>[];
}

let dir: string;
let server: Server;
const cases: Record<string, () => Case> = {};

beforeAll(async () => {
  dir = realpathSync(mkdtempSync(join(tmpdir(), 'warden-contract-')));
  const root = join(dir, 'files');
  mkdirSync(join(root, 'web'), { recursive: true });
  writeFileSync(join(root, 'app.json'), JSON.stringify({ database: { version: '15.4' } }));
  writeFileSync(join(root, 'web', 'pnpm-lock.yaml'), '');
  const repo = join(dir, 'repo');
  mkdirSync(repo);
  writeFileSync(join(repo, 'deploy.yaml'), 'branch: staging\n');
  sh(repo, 'init', '-q');
  sh(repo, 'add', '.');
  sh(repo, 'commit', '-qm', 'deploy');
  server = createServer((_req, res) => res.setHeader('content-type', 'application/json').end(JSON.stringify({ database: { version: '15.4' } })));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;

  const postgres = { agrees: { subject: 'db', fact: 'the database is Postgres 15' }, contradicted: [{ subject: 'db', fact: 'the database is Postgres 14' }, { subject: 'db', fact: 'the database is Postgres 16' }] };
  cases.file = () => ({
    verifier: BUILTIN_VERIFIERS.file!,
    allow: { fileRoots: [root] },
    rule: { match: { source: '^file:(?<path>.+)$', fact: 'Postgres (?<version>\\d+)' }, use: 'file', with: { path: '${path}', select: '$.database.version', expect: '^${version}(\\.|$)' } },
    source: 'file:app.json',
    ...postgres,
  });
  cases.http = () => ({
    verifier: BUILTIN_VERIFIERS.http!,
    allow: { httpHosts: [`127.0.0.1:${port}`] },
    rule: { match: { source: '^status:(?<path>[a-z]+)$', fact: 'Postgres (?<version>\\d+)' }, use: 'http', with: { url: `http://127.0.0.1:${port}/\${path}`, select: '$.database.version', expect: '^${version}(\\.|$)' } },
    source: 'status:db',
    ...postgres,
  });
  cases.git = () => ({
    verifier: BUILTIN_VERIFIERS.git!,
    allow: { gitRepos: [repo] },
    rule: { match: { source: '^repo:(?<file>[\\w.]+)$', fact: 'deploys through (?<branch>\\w+)$' }, use: 'git', with: { repo, path: '${file}', select: 'branch', expect: '^${branch}$' } },
    source: 'repo:deploy.yaml',
    agrees: { subject: 'deploys', fact: 'deploys through staging' },
    contradicted: [{ subject: 'deploys', fact: 'deploys through production' }],
  });
  cases['package-manager'] = () => ({
    verifier: packageManager as Verifier<any>,
    allow: { fileRoots: [root] },
    // as the example's header says
    rule: { match: { source: '^project:(?<dir>[a-z0-9-]+)$', subject: 'package manager' }, use: 'package-manager', with: { dir: '${dir}' }, replacement: 'prefers ${value}' },
    source: 'project:web',
    agrees: { subject: 'package manager', fact: 'prefers pnpm' },
    contradicted: [{ subject: 'package manager', fact: 'prefers yarn' }, { subject: 'package manager', fact: 'uses npm' }],
  });
});

afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

async function verdicts(c: Case, memories: Pick<MemoryUnderReview, 'subject' | 'fact'>[]) {
  const { rules } = verifySchema.parse({ rules: [c.rule] });
  const list = memories.map((m, i) => ({ id: `m_${i}`, source: c.source, confirmed_at: daysAgo(100), ...m }));
  const r = await verifyAll(list, {
    rules: compileRules({ rules }, {}),
    registry: BUILTIN_VERIFIERS[c.verifier.name] ? createRegistry() : createRegistry([{ file: 'plugin', verifier: c.verifier }]),
    concurrency: 2,
    timeoutMs: 20_000,
    allow: { fileRoots: [], gitRepos: [], httpHosts: [], ...c.allow } as never,
    cacheDir: join(dir, 'cache'),
    log: silentLogger,
    now: NOW,
    signal: new AbortController().signal,
    accepted: () => undefined,
  });
  return r.decisions.map((d) => ({ fact: d.memory.fact, verdict: d.verdict, evidence: d.evidence }));
}

describe('the verifier contract', () => {
  it('has a case for every built-in verifier and the example plugin', () => {
    expect(Object.keys(cases).sort()).toEqual([...Object.keys(BUILTIN_VERIFIERS), 'package-manager'].sort());
  });

  it('a rule without expect: the first reading confirms only a memory that says what the rule\'s replacement says for it', async () => {
    const c = cases.file!();
    const rule = { ...c.rule, match: { source: '^file:(?<path>.+)$' }, with: { path: '${path}', select: '$.database.version' }, replacement: 'the database is Postgres ${value}' };
    const got = await verdicts({ ...c, rule }, [{ subject: 'db', fact: 'the database is Postgres 15.4' }, { subject: 'db', fact: 'the database is Postgres 14' }]);
    expect(got[0]).toMatchObject({ verdict: 'confirmed' });
    expect(got[1]).toMatchObject({ verdict: 'contradicted', evidence: { replacement: { fact: 'the database is Postgres 15.4' } } });
  });

  describe.each(['file', 'git', 'http', 'package-manager'])('%s', (name) => {
    it('a memory contradicted by its evidence is never confirmed; one the evidence agrees with is', async () => {
      const c = cases[name]!();
      const unjudged = { subject: c.agrees.subject, fact: 'the team likes tabs' };
      const got = await verdicts(c, [c.agrees, unjudged, ...c.contradicted]);
      // a memory the rule cannot read a claim from is not judged: a person looks, or the verifier says it cannot tell
      expect(got[1], JSON.stringify(got[1])).toMatchObject({ fact: unjudged.fact, verdict: 'unverifiable' });
      expect(got[0], JSON.stringify(got[0])).toMatchObject({ fact: c.agrees.fact, verdict: 'confirmed' });
      for (const v of got.slice(2)) {
        expect(v.verdict, JSON.stringify(v)).not.toBe('confirmed');
        expect(v.verdict).toBe('contradicted');
      }
    });
  });
});
