import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import http, { checkUrl, findSample } from '../../src/verifiers/http.js';
import { runVerifier } from '../../src/drift/dispatch.js';
import { drift } from '../../jobs/drift.js';
import { configFor, daysAgo, insertRows, jobContext, row, sandbox, type Sandbox } from '../drift/helpers.js';

const METRICS = `# HELP pg_up whether the database answers
# TYPE pg_up gauge
pg_up{instance="db1"} 1
pg_up{instance="db2"} 0
pg_static{server="db1",version="15.4"} 1
process_start_time_seconds 1.7e9
`;

/** A real server on loopback that counts what it is asked. */
function serve(handler: (path: string, headers: Record<string, string | string[] | undefined>) => { status: number; body?: string; type?: string; location?: string }) {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(req.url ?? '');
    const r = handler(req.url ?? '', req.headers);
    res.writeHead(r.status, { 'content-type': r.type ?? 'text/plain', ...(r.location ? { location: r.location } : {}) });
    res.end(r.body ?? '');
  });
  return new Promise<{ server: Server; base: string; port: number; hits: string[] }>((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as AddressInfo).port;
      resolve({ server, base: `http://127.0.0.1:${port}`, port, hits });
    }),
  );
}

describe('http verifier', () => {
  let monitor: Awaited<ReturnType<typeof serve>>;
  let internal: Awaited<ReturnType<typeof serve>>;
  let hosts: string[];
  beforeAll(async () => {
    internal = await serve(() => ({ status: 200, body: '{"secret": true}', type: 'application/json' }));
    monitor = await serve((path, headers) => {
      if (path === '/status.json') return { status: 200, body: JSON.stringify({ database: { version: '15.4', up: true } }), type: 'application/json' };
      if (path === '/metrics') return { status: 200, body: METRICS };
      if (path === '/private') return headers.authorization === 'Bearer s3cret' ? { status: 200, body: 'ok' } : { status: 401 };
      if (path === '/moved') return { status: 302, location: '/status.json' };
      if (path === '/away') return { status: 302, location: `${internal.base}/` };
      if (path === '/broken') return { status: 503, body: 'down' };
      return { status: 404 };
    });
    hosts = [`127.0.0.1:${monitor.port}`];
  });
  afterAll(async () => {
    await new Promise((r) => monitor.server.close(r));
    await new Promise((r) => internal.server.close(r));
  });

  const run = (params: object, allowHosts = hosts) => runVerifier(http, params, { allow: { httpHosts: allowHosts }, timeoutMs: 5000 });

  it('reads a JSON path, a Prometheus sample, a label, the status and the body', async () => {
    expect(await run({ url: `${monitor.base}/status.json`, select: '$.database.version' })).toMatchObject({ value: '15.4', evidence: { status: 200 } });
    expect(await run({ url: `${monitor.base}/metrics`, metric: 'pg_up{instance="db2"}' })).toMatchObject({ value: 0 });
    expect(await run({ url: `${monitor.base}/metrics`, metric: 'pg_static{server="db1"}', label: 'version' })).toMatchObject({ value: '15.4' });
    expect(await run({ url: `${monitor.base}/nothing`, read: 'status' })).toMatchObject({ value: 404 });
    expect(await run({ url: `${monitor.base}/metrics`, read: 'body' })).toMatchObject({ value: METRICS });
    expect(await run({ url: `${monitor.base}/private`, headers: { authorization: 'Bearer s3cret' } })).toMatchObject({ value: 'ok' });
  });

  it('is unverifiable on a failing endpoint or a missing value, and follows same-host redirects only', async () => {
    expect(await run({ url: `${monitor.base}/broken`, select: '$.x' })).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/503/) });
    expect(await run({ url: `${monitor.base}/status.json`, select: '$.nope' })).toMatchObject({ verdict: 'unverifiable' });
    expect(await run({ url: `${monitor.base}/metrics`, metric: 'pg_up{instance="db9"}' })).toMatchObject({ verdict: 'unverifiable' });
    expect(await run({ url: `${monitor.base}/moved`, select: '$.database.version' })).toMatchObject({ value: '15.4' });
    const before = internal.hits.length;
    expect(await run({ url: `${monitor.base}/away` })).toMatchObject({ verdict: 'refused', reason: expect.stringMatching(/redirects to another host/) });
    expect(internal.hits.length).toBe(before);
  });

  it('refuses hosts, ports, schemes and credentials the allowlist does not name, before any request', async () => {
    const before = internal.hits.length;
    for (const url of [
      `${internal.base}/`,
      'http://169.254.169.254/latest/meta-data/',
      'http://[::1]/',
      'http://0x7f.0.0.1/',
      `http://user:pw@127.0.0.1:${monitor.port}/status.json`,
      `file:///etc/passwd`,
      'not a url',
    ]) {
      expect(await run({ url }), url).toMatchObject({ verdict: 'refused' });
    }
    expect(internal.hits.length).toBe(before);
    // the WHATWG parser's view of the host is what is checked: 0x7f.0.0.1 is 127.0.0.1, and only that port
    expect(() => checkUrl(`http://0x7f.0.0.1:${monitor.port}/`, hosts)).not.toThrow();
    expect(() => checkUrl(`http://0x7f.0.0.1:${internal.port}/`, hosts)).toThrow(/not on verify.allow.httpHosts/);
    expect(() => checkUrl('http://Prom.Example:9090/x', ['prom.example'])).not.toThrow();
    expect(() => checkUrl('http://prom.example.evil.com/', ['prom.example'])).toThrow();
  });

  it('finds Prometheus samples by name and labels', () => {
    expect(findSample(METRICS, 'process_start_time_seconds')).toMatchObject({ value: 1.7e9 });
    expect(findSample(METRICS, 'pg_up')).toMatchObject({ value: 1, labels: { instance: 'db1' } });
    expect(findSample(METRICS, 'pg_down')).toBeUndefined();
  });

  describe('in the drift job', () => {
    let box: Sandbox;
    beforeEach(() => {
      box = sandbox();
    });
    afterEach(() => box.cleanup());

    it('judges several memories with one request per URL, refuses an internal address, keeps headers to env', async () => {
      insertRows(box.dbPath, [
        { id: 'm_a', fact: 'the database is Postgres 15', source: `monitor:${monitor.base}/status.json`, confirmed_at: daysAgo(100) },
        { id: 'm_b', fact: 'the database is Postgres 15', source: `monitor:${monitor.base}/status.json`, confirmed_at: daysAgo(101) },
        { id: 'm_c', fact: 'the database is Postgres 15', source: `monitor:${monitor.base}/status.json`, confirmed_at: daysAgo(102) },
        { id: 'm_up', subject: 'db2', fact: 'db2 is up', source: 'metric:pg_up', confirmed_at: daysAgo(103) },
        { id: 'm_meta', fact: 'the database is Postgres 15', source: 'monitor:http://169.254.169.254/latest/meta-data', confirmed_at: daysAgo(104) },
        { id: 'm_int', fact: 'the database is Postgres 15', source: `monitor:${internal.base}/`, confirmed_at: daysAgo(105) },
      ]);
      const config = configFor(box, {
        allow: { httpHosts: hosts },
        rules: [
          { match: { source: '^monitor:(?<url>https?://\\S+)$', fact: 'Postgres 15$' }, use: 'http', with: { url: '${url}', select: '$.database.version', expect: '^15\\.' } },
          {
            match: { source: '^metric:(?<name>[a-z_]+)$', subject: '^(?<instance>db\\d)$', fact: 'is up$' },
            use: 'http',
            with: { url: `${monitor.base}/metrics`, metric: '${name}{instance="${instance}"}', expect: 1 },
          },
        ],
      });
      const before = { status: monitor.hits.filter((h) => h === '/status.json').length, internal: internal.hits.length };
      const r = await drift({ store: 'agent' }, jobContext(config));
      const byId = Object.fromEntries(r.verdicts.map((v) => [v.id, v]));
      expect(byId.m_a!.verdict).toBe('confirmed');
      expect(byId.m_b!.verdict).toBe('confirmed');
      expect(byId.m_c!.verdict).toBe('confirmed');
      expect(byId.m_up!.verdict).toBe('contradicted');
      expect(byId.m_meta).toMatchObject({ verdict: 'refused', reason: expect.stringMatching(/169\.254\.169\.254 is not on/) });
      expect(byId.m_int).toMatchObject({ verdict: 'refused' });
      expect(monitor.hits.filter((h) => h === '/status.json').length - before.status).toBe(1);
      expect(internal.hits.length).toBe(before.internal);
      expect(row(box.dbPath, 'm_up')!.superseded_by).toBeNull();
    });

    it('takes header values from the environment, never from memory text', async () => {
      const base = { allow: { httpHosts: hosts } };
      const env = { ...process.env, MONITOR_TOKEN: 's3cret' };
      const ok = configFor(box, { ...base, rules: [{ match: { source: '^p$', fact: 'is ok$' }, use: 'http', with: { url: `${monitor.base}/private`, headers: { authorization: 'Bearer ${MONITOR_TOKEN}' }, expect: 'ok' } }] });
      const { prepareVerification } = await import('../../src/drift/setup.js');
      const prepared = await prepareVerification(ok, env);
      expect(prepared.rules).toHaveLength(1);
      const bad = configFor(box, { ...base, rules: [{ match: { source: '^p:(?<tok>.+)$' }, use: 'http', with: { url: `${monitor.base}/private`, headers: { authorization: 'Bearer ${tok}' } } }] });
      await expect(prepareVerification(bad, env)).rejects.toThrow(/verify\.rules\.0\.with\.headers\.authorization: .*only environment variables/);
    });
  });
});
