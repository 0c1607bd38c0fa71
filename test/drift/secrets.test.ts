import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { execFileSync, spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import YAML from 'yaml';
import { CLI } from '../helpers/cli.js';
import { DAY_MS } from '../../src/time/instants.js';
import { configFor, daysAgo, insertRows, NOW, sandbox, withDb, withState, type Sandbox } from './helpers.js';
import { createVerifyTask, type VerifyTaskPayload } from '../../src/drift/task.js';
import { silentLogger } from '../../src/log/logger.js';
import { loadConfig } from '../../src/config/config.js';
import { runJob } from '../../src/job/runner.js';

/**
 * Class 7 of issue 11: a value from the environment put in a verifier rule (URL query, path, host, header, git URL,
 * plugin parameter) is used to read, and is never recorded or printed: not in the state db (file and WAL), not in
 * the store, not on stdout or stderr of `run drift` (logs at debug), not in the digest preview. The loopback server
 * echoes what it was sent, so evidence, values and error messages all carry the secrets back.
 */
const PACKAGE_ROOT = resolve(import.meta.dirname, '../..');

const TOKENS = {
  PROM_TOKEN: 'qTok-7f3a9c1e5b',
  PATH_TOKEN: 'p@th tok"9d2e',
  HDR_TOKEN: 'hdrSecret-4b8c2d',
  HOST_TOKEN: 'hosttok5e6f7a',
  BADURL_TOKEN: 'badurlTok-2c3d',
  GIT_TOKEN: 'ghp_gitTok8c9d0e1f',
  GIT_PATH_TOKEN: 'repoTok-5f6e7d',
  PLUGIN_TOKEN: 'plugTok÷3a4b',
  USERINFO_TOKEN: 'userinfoTok-aa11',
};

/** Every form a token may take on the way: as is, percent-encoded, JSON-escaped, base64 (as in Basic auth). */
function forms(token: string): string[] {
  return [token, encodeURIComponent(token), encodeURI(token), JSON.stringify(token).slice(1, -1), Buffer.from(token).toString('base64').slice(0, 12)];
}

function leaks(text: string): string[] {
  return Object.entries(TOKENS).flatMap(([name, t]) => forms(t).filter((f) => text.includes(f)).map((f) => `${name} as ${JSON.stringify(f)}`));
}

const PLUGIN = `
import { defineVerifier } from 'memory-warden';
export default defineVerifier({
  name: 'keyed',
  async verify(task, ctx) {
    const key = task.params.key;
    ctx.log.warn({ key, encoded: encodeURIComponent(key) }, 'keyed verifier sees its key ' + key);
    throw new Error('upstream refused key ' + key + ' (' + encodeURIComponent(key) + ')');
  },
});
`;

function run(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, LOG_LEVEL: 'debug', ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => done({ code: code ?? -1, stdout, stderr }));
  });
}

describe('secrets in verifier rules stay secrets', () => {
  let box: Sandbox;
  let server: Server;
  let port: number;
  const seen: string[] = [];
  beforeAll(async () => {
    expect(existsSync(CLI), 'build first: npx tsc -p .').toBe(true);
    box = sandbox();
    server = createServer((req, res) => {
      const echo = JSON.stringify({ url: req.url, headers: req.headers });
      seen.push(echo);
      // A path segment carrying the token fails, and says which URL it was.
      if (req.url?.startsWith('/t/')) {
        res.writeHead(503, { 'content-type': 'text/plain' });
        res.end(`no such tenant: ${req.url}`);
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(echo);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
    box.cleanup();
  });

  function writeConfig(): string {
    mkdirSync(join(box.dir, 'node_modules'), { recursive: true });
    if (!existsSync(join(box.dir, 'node_modules', 'memory-warden'))) symlinkSync(PACKAGE_ROOT, join(box.dir, 'node_modules', 'memory-warden'));
    writeFileSync(join(box.dir, 'keyed.mjs'), PLUGIN);
    const base = `http://127.0.0.1:${port}`;
    const gitUrl = 'https://x-access-token:${GIT_TOKEN}@127.0.0.1:9/ops/deploy.git';
    // a local repository whose folder name is the secret: the evidence names the repository
    const repo = join(box.dir, 'repos', TOKENS.GIT_PATH_TOKEN);
    mkdirSync(repo, { recursive: true });
    writeFileSync(join(repo, 'deploy.yaml'), 'branch: staging\n');
    const git = (...args: string[]) => execFileSync('git', ['-C', repo, '-c', 'user.name=t', '-c', 'user.email=t@example.org', ...args]);
    git('init', '-q');
    git('add', '.');
    git('commit', '-qm', 'deploy');
    const repoRef = join(box.dir, 'repos', '${GIT_PATH_TOKEN}');
    const file = join(box.dir, 'warden.yaml');
    writeFileSync(file, YAML.stringify({
      stateDb: './state.db',
      stores: { agent: { db: './memory.db' } },
      verify: {
        plugins: ['./keyed.mjs'],
        cacheDir: './cache',
        timeoutMs: 10_000,
        allow: { httpHosts: [`127.0.0.1:${port}`], gitRepos: [gitUrl, repoRef] },
        rules: [
          // the value read echoes the URL; expect fails; the replacement would write it into the store
          { match: { source: '^q:(?<n>\\w+)$', fact: '.' }, use: 'http', with: { url: `${base}/echo?api_key=\${PROM_TOKEN}&n=\${n}`, read: 'body', expect: 'never' }, replacement: 'echo says ${value}', autoSupersede: true },
          { match: { source: '^path:(?<n>\\w+)$', fact: '.' }, use: 'http', with: { url: `${base}/t/\${PATH_TOKEN}/\${n}`, expect: 'x' } },
          // no expect: the first reading (headers echoed) is the baseline
          { match: { source: '^hdr:(?<n>\\w+)$' }, use: 'http', with: { url: `${base}/h/\${n}`, headers: { Authorization: 'Bearer ${HDR_TOKEN}', 'X-Api-Key': '${HDR_TOKEN}' }, select: '$.headers' } },
          { match: { source: '^host:(?<n>\\w+)$', fact: '.' }, use: 'http', with: { url: 'http://${HOST_TOKEN}.invalid/${n}', expect: 'x' } },
          { match: { source: '^bad:(?<n>\\w+)$', fact: '.' }, use: 'http', with: { url: 'http://[${BADURL_TOKEN}/${n}', expect: 'x' } },
          { match: { source: '^user:(?<n>\\w+)$', fact: '.' }, use: 'http', with: { url: `http://svc:\${USERINFO_TOKEN}@127.0.0.1:${port}/\${n}`, expect: 'x' } },
          { match: { source: '^git:(?<f>[\\w.]+)$', fact: '.' }, use: 'git', with: { repo: gitUrl, path: '${f}', expect: 'x' } },
          { match: { source: '^local:(?<f>[\\w.]+)$', fact: '.' }, use: 'git', with: { repo: repoRef, path: '${f}', select: 'branch', expect: 'main' } },
          { match: { source: '^plug:(?<n>\\w+)$' }, use: 'keyed', with: { key: '${PLUGIN_TOKEN}' } },
        ],
      },
    }));
    return file;
  }

  it('reads with them, and records and prints none of them, run after run', async () => {
    insertRows(box.dbPath, [
      { id: 'm_q', fact: 'the echo is quiet', source: 'q:one', confirmed_at: daysAgo(200) },
      { id: 'm_path', fact: 'tenant one is up', source: 'path:one', confirmed_at: daysAgo(199) },
      { id: 'm_hdr', fact: 'the api takes our key', source: 'hdr:one', confirmed_at: daysAgo(198) },
      { id: 'm_host', fact: 'the host answers', source: 'host:one', confirmed_at: daysAgo(197) },
      { id: 'm_bad', fact: 'the url parses', source: 'bad:one', confirmed_at: daysAgo(196) },
      { id: 'm_user', fact: 'basic auth works', source: 'user:one', confirmed_at: daysAgo(195) },
      { id: 'm_git', fact: 'deploys from main', source: 'git:deploy.yaml', confirmed_at: daysAgo(194) },
      { id: 'm_local', fact: 'deploys from main', source: 'local:deploy.yaml', confirmed_at: daysAgo(194) },
      { id: 'm_plug', fact: 'the key is valid', source: 'plug:one', confirmed_at: daysAgo(193) },
    ]);
    const file = writeConfig();
    const outputs: string[] = [];
    for (let i = 0; i < 3; i++) {
      const now = new Date(NOW + i * 100 * DAY_MS).toISOString();
      const r = await run(['run', 'drift', '--config', file, '--store', 'agent', '--json', '--now', now], TOKENS);
      expect(r.code, r.stderr).toBe(0);
      outputs.push(r.stdout, r.stderr);
    }
    const preview = await run(['digest', '--preview', '--config', file, '--now', new Date(NOW + DAY_MS).toISOString(), '--out', join(box.dir, 'preview.html')], TOKENS);
    outputs.push(preview.stdout, preview.stderr);
    const failing = await run(['run', 'drift', '--config', file, '--store', 'nope'], TOKENS);
    outputs.push(failing.stdout, failing.stderr);

    // The secrets were really used: the server saw them.
    const sent = seen.join('\n');
    expect(sent).toContain(TOKENS.PROM_TOKEN);
    expect(sent).toContain(TOKENS.HDR_TOKEN);
    expect(sent).toContain(encodeURI(TOKENS.PATH_TOKEN).replace(/"/g, '%22'));
    // And they came back in evidence and errors, where they now read as ${NAME}.
    const all = outputs.join('\n');
    expect(all).toContain('/t/${PATH_TOKEN}/one answered 503');
    expect(all).toContain('keyed: upstream refused key ${PLUGIN_TOKEN} (${PLUGIN_TOKEN})');
    expect(all).toContain('host ${HOST_TOKEN}.invalid is not on verify.allow.httpHosts');

    expect(leaks(all), 'stdout/stderr of run drift and digest --preview').toEqual([]);
    expect(leaks(readFileSync(join(box.dir, 'preview.html'), 'utf8')), 'preview html').toEqual([]);
    for (const f of ['state.db', 'state.db-wal', 'memory.db', 'memory.db-wal']) {
      const path = join(box.dir, f);
      if (existsSync(path)) expect(leaks(readFileSync(path).toString('latin1')), f).toEqual([]);
      if (existsSync(path)) expect(leaks(readFileSync(path).toString('utf8')), f).toEqual([]);
    }
    // The echo's replacement was written once (redacted) and then settled: the same reading gives the same row.
    withDb(box.dbPath, (db) => expect((db.prepare('SELECT count(*) AS n FROM memory').get() as { n: number }).n).toBe(10));
    withState(box.statePath, (state) => {
      const evidence = (state.prepare(`SELECT evidence FROM drift_verdicts`).all() as { evidence: string }[]).map((r) => r.evidence).join('\n');
      expect(evidence).toContain('${PROM_TOKEN}');
      expect(evidence).toContain('${HDR_TOKEN}');
      expect(evidence).toContain('${PLUGIN_TOKEN}');
      expect(evidence).toContain('/repos/${GIT_PATH_TOKEN}');
      expect(leaks(evidence)).toEqual([]);
      const runs = (state.prepare(`SELECT coalesce(result, '') || coalesce(error, '') AS t FROM job_runs`).all() as { t: string }[]).map((r) => r.t).join('\n');
      expect(leaks(runs)).toEqual([]);
    });
  }, 240_000);

  it('a verify task under the worker sends nothing of them through Redis, and judges the value as read', async () => {
    const config = configFor(box, {
      allow: { httpHosts: [`127.0.0.1:${port}`] },
      rules: [
        { match: { source: '^q:(?<n>\\w+)$', fact: '.' }, use: 'http', with: { url: `http://127.0.0.1:${port}/echo?api_key=\${PROM_TOKEN}`, select: '$.url', expect: { matches: 'api_key=${PROM_TOKEN}' } } },
        { match: { source: '^p:(?<n>\\w+)$', fact: '.' }, use: 'http', with: { url: `http://127.0.0.1:${port}/t/\${PATH_TOKEN}`, expect: 'x' } },
      ],
    });
    const prev = { ...process.env };
    Object.assign(process.env, TOKENS);
    try {
      const task = createVerifyTask(config);
      const payload = (rule: number, source: string): VerifyTaskPayload => ({
        v: 1, run: `r${rule}`, store: 'agent', rule, verifier: 'http', now: NOW,
        memory: { id: `m_${rule}`, subject: 'echo', fact: 'f', source, confirmed_at: daysAgo(100) },
      });
      const ctx = { log: silentLogger, signal: new AbortController().signal, attempt: 1, lastAttempt: true };
      const echoed = await task.run(payload(0, 'q:one'), ctx);
      const failed = await task.run(payload(1, 'p:one'), ctx);
      const wire = JSON.stringify([echoed, failed]);
      expect(leaks(wire)).toEqual([]);
      expect(echoed).toMatchObject({ result: { value: '/echo?api_key=${PROM_TOKEN}' }, expectHeld: true });
      expect(failed).toMatchObject({ result: { verdict: 'unverifiable', reason: expect.stringContaining('/t/${PATH_TOKEN} answered 503') } });
    } finally {
      for (const k of Object.keys(TOKENS)) if (prev[k] === undefined) delete process.env[k];
    }
  });

  it('a local path from the environment is no secret: an error names the file (issue 11 class 9), the job record too', async () => {
    const file = join(box.dir, 'failing.yaml');
    writeFileSync(file, YAML.stringify({ stateDb: './state.db', stores: { agent: { db: './memory.db' } }, verify: { plugins: ['${PLUGIN_DIR}/missing.mjs'] } }));
    const env = { PLUGIN_DIR: join(box.dir, 'pluginDirSecret-31') };
    const config = loadConfig({ file, env });
    const err = await runJob('drift', { store: 'agent' }, { jobs: JOBS, config, log: silentLogger }).catch((e: Error) => e);
    expect((err as Error).message).toContain(`verify plugin ${env.PLUGIN_DIR}/missing.mjs: no such file`);
    withState(box.statePath, (state) => {
      const last = state.prepare(`SELECT error FROM job_runs ORDER BY id DESC LIMIT 1`).get() as { error: string };
      expect(last.error).toContain(`${env.PLUGIN_DIR}/missing.mjs`);
    });
  });
});
