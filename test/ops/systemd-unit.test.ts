import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import YAML from 'yaml';
import { qdrantTarget, type QdrantTarget } from '../helpers/qdrant-server.js';
import { startTestRedis, uniquePrefix, deletePrefix, type TestRedis } from '../helpers/redis.js';
import { makeStore, tempDir } from '../helpers/store.js';
import { until, type LogLine } from '../queue/fixtures.js';

/**
 * The systemd unit of docs/worker.md, as written there, with the README's one-machine config: `systemd-analyze
 * verify` accepts it, and the worker runs its jobs under the unit's sandbox. systemd itself is not started (there is
 * none to start it in a test); test/ops/systemd-sandbox.sh does what the unit's settings tell systemd to do, in a
 * mount namespace of its own: the machine's paths the unit and config name (/etc/memory-warden, /srv/agent, its
 * WorkingDirectory, …) are the test's folders there, everything is read-only but ReadWritePaths= and
 * StateDirectory=, /tmp is the service's own, the home folders are shut, and the worker runs as an unprivileged user
 * with no new privileges. Only what the test must own differs from the docs: Qdrant's and Redis's addresses (its
 * servers on loopback), a Redis prefix of its own, and the worker's host name and health port.
 */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);
const SANDBOX = join(ROOT, 'test/ops/systemd-sandbox.sh');
// Every [Service] setting the sandbox script carries out, or that plays no part in one run of the worker.
const UNDERSTOOD = new Set(['User', 'WorkingDirectory', 'EnvironmentFile', 'Environment', 'ExecStart', 'KillSignal', 'TimeoutStopSec', 'Restart', 'RestartSec',
  'NoNewPrivileges', 'ProtectSystem', 'ProtectHome', 'PrivateTmp', 'ReadWritePaths', 'StateDirectory', 'StateDirectoryMode']);

/** The text of the first fenced block of `lang` in `markdown` after `after`. */
function block(markdown: string, lang: string, after = ''): string {
  const from = markdown.indexOf(after);
  const m = new RegExp('```' + lang + '\\n([\\s\\S]*?)```').exec(markdown.slice(from));
  if (from < 0 || !m) throw new Error(`no \`\`\`${lang} block after "${after}"`);
  return m[1]!;
}

/** A unit's [Service] settings, each key with its values in order. */
function serviceSettings(unit: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let section = '';
  for (const raw of unit.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const s = /^\[(\w+)\]$/.exec(line);
    if (s) {
      section = s[1]!;
      continue;
    }
    const kv = /^(\w+)=(.*)$/.exec(line);
    if (!kv) throw new Error(`unit: not a setting: ${line}`);
    if (section === 'Service') out.set(kv[1]!, [...(out.get(kv[1]!) ?? []), kv[2]!]);
  }
  return out;
}

const unitText = block(readFileSync(join(ROOT, 'docs/worker.md'), 'utf8'), 'ini', '## Running it under pm2 or systemd');
const configText = block(readFileSync(join(ROOT, 'README.md'), 'utf8'), 'yaml', '### One machine');

describe('the systemd unit in docs/worker.md', () => {
  let dir: string;
  let cleanup: () => void;
  let redis: TestRedis;
  let q: QdrantTarget;
  let worker: ChildProcess | undefined;
  beforeAll(async () => {
    ({ dir, cleanup } = tempDir('mw-systemd-'));
    chmodSync(dir, 0o755);
    redis = await startTestRedis();
    q = await qdrantTarget();
  });
  afterAll(async () => {
    if (worker && worker.exitCode === null && worker.signalCode === null) {
      const exited = new Promise((r) => worker!.once('exit', r));
      worker.kill('SIGKILL');
      await exited;
    }
    await q?.close();
    await redis?.stop();
    cleanup?.();
  });

  it('systemd-analyze verify accepts it', () => {
    const file = join(dir, 'memory-warden.service');
    writeFileSync(file, unitText);
    const r = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8' });
    expect(r.error).toBeUndefined();
    expect(`${r.stdout}${r.stderr}`.trim()).toBe('');
    expect(r.status).toBe(0);
  });

  it('the worker runs prune, integrity and snapshot under its sandbox, writing only where the unit lets it', async () => {
    const unit = serviceSettings(unitText);
    expect([...unit.keys()].filter((k) => !UNDERSTOOD.has(k))).toEqual([]);
    const one = (key: string) => unit.get(key)?.at(-1);
    const config = YAML.parse(configText) as Record<string, any>;
    const storeDb: string = config.stores.agent.db;
    const stateDb: string | undefined = config.stateDb;
    const snapshotRoot: string = config.snapshot.root;
    const configPath = /--config (\S+)/.exec(one('ExecStart')!)![1]!;

    // The test's stand-ins for the machine's folders.
    const uid = 65534; // nobody: the unit's user, unprivileged
    const at = (name: string, mode = 0o700) => {
      const p = join(dir, name);
      mkdirSync(p, { recursive: true, mode });
      chmodSync(p, mode);
      return p;
    };
    const etc = at('etc', 0o755);
    const storeDir = at('store');
    const backups = at('backups');
    const state = at('state', Number.parseInt(one('StateDirectoryMode') ?? '0755', 8));
    const scratch = at('scratch');
    // The store, with rows past their expiry, and its Qdrant collection; the agent's folder is the worker's to write.
    const collection = q.name('memories');
    await q.createCollection(collection);
    const rows = [
      { id: 'old1', fact: 'away this week', expires_at: '2020-01-01 00:00:00' },
      { id: 'old2', fact: 'staging is down', expires_at: '2020-01-02 00:00:00' },
      { id: 'keep', fact: 'prefers pnpm' },
    ];
    makeStore(join(storeDir, 'memory.db'), rows);
    await q.upsert(collection, rows.map((r, i) => ({ id: i + 1, payload: { memory_id: r.id, text: r.fact } })));
    for (const p of [storeDir, backups, state, ...readdirSync(storeDir).map((f) => join(storeDir, f))]) chownSync(p, uid, uid);

    // The README's config, as written, but for the addresses and names that are the test's.
    const prefix = uniquePrefix('systemd');
    config.stores.agent.qdrant = { ...config.stores.agent.qdrant, url: q.url, collections: [collection], pointId: 'payload', textKey: 'text' };
    if (!q.apiKey) delete config.stores.agent.qdrant.apiKey;
    config.redis = { prefix };
    config.worker = { host: 'sandbox', http: { port: 0 } };
    writeFileSync(join(etc, 'config.yaml'), YAML.stringify(config));
    chmodSync(join(etc, 'config.yaml'), 0o644);
    const envFile = one('EnvironmentFile')!;
    writeFileSync(join(etc, 'env'), `# the secrets\nREDIS_URL=${redis.url}\nQDRANT_API_KEY=${q.apiKey ?? 'unused'}\nSMTP_PASSWORD=unused\n`);

    // The service's environment as systemd makes it: its own PATH, the user's names, Environment=, the env file.
    const env: Record<string, string> = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin', USER: 'warden', LOGNAME: 'warden', HOME: '/', SHELL: '/usr/sbin/nologin', LOG_LEVEL: 'info' };
    for (const e of unit.get('Environment') ?? []) for (const [, k, v] of e.matchAll(/(\w+)=(\S*)/g)) env[k!] = v!;
    for (const line of readFileSync(join(etc, 'env'), 'utf8').split('\n')) {
      const kv = /^(\w+)=(.*)$/.exec(line);
      if (kv) env[kv[1]!] = kv[2]!;
    }

    const stateDirectory = one('StateDirectory') === undefined ? undefined : `/var/lib/${one('StateDirectory')}`;
    const provide = [
      [etc, configPath.slice(0, configPath.lastIndexOf('/'))],
      [ROOT, one('WorkingDirectory')!],
      [process.execPath, one('ExecStart')!.split(' ')[0]!], // the Node this suite runs, where the unit looks for one
      [storeDir, storeDb.slice(0, storeDb.lastIndexOf('/'))],
      [backups, snapshotRoot],
      ...(stateDirectory ? [[state, stateDirectory]] : []),
    ];
    expect(envFile.startsWith(`${provide[0]![1]}/`)).toBe(true);
    const rw = [...(one('ReadWritePaths') ?? '').split(/\s+/).filter(Boolean), ...(stateDirectory ? [stateDirectory] : [])];
    // A writable path no test folder stands for: an empty one, owned by the service's user (as made at install).
    rw.filter((p) => !provide.some(([, dest]) => dest === p)).forEach((p, i) => {
      const made = at(`rw-${i}`);
      chownSync(made, uid, uid);
      provide.push([made, p]);
    });
    const args = [scratch, String(uid), String(uid), one('NoNewPrivileges') === 'yes' ? '1' : '0', one('WorkingDirectory')!];
    for (const [src, dest] of provide) args.push('provide', src!, dest!);
    for (const p of rw) args.push('rw', p);
    if (one('PrivateTmp') === 'yes') args.push('tmp');
    if (one('ProtectHome') === 'yes') args.push('home');
    expect(one('ProtectSystem')).toBe('strict');
    args.push('--', ...one('ExecStart')!.split(' '));

    worker = spawn('unshare', ['-m', 'bash', SANDBOX, ...args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    const lines: LogLine[] = [];
    let raw = '';
    worker.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      raw += chunk;
      for (const l of chunk.split('\n')) {
        try {
          lines.push(JSON.parse(l) as LogLine);
        } catch {
          // a part of a line, or not a log line
        }
      }
    });
    const seen = (what: string, pred: (l: LogLine) => boolean) =>
      until(what, () => {
        if (worker!.exitCode !== null) throw new Error(`the worker exited (${worker!.exitCode}) before ${what}: ${raw.slice(-2000)}`);
        return lines.find(pred);
      }, 60_000);
    await seen('the worker to be ready', (l) => l.msg === 'worker ready');

    const outsideConfig = join(dir, 'outside.yaml'); // the same config, for enqueue from outside the sandbox
    writeFileSync(outsideConfig, YAML.stringify(config));
    for (const job of ['prune', 'integrity', 'snapshot']) {
      // Not spawnSync: Qdrant's test server runs in this process, and the job talks to it while enqueue waits.
      const r = await run(process.execPath, [join(ROOT, 'dist/src/cli.js'), 'enqueue', job, '--store', 'agent', '--config', outsideConfig, '--json'], {
        encoding: 'utf8', env: { ...process.env, REDIS_URL: redis.url, QDRANT_API_KEY: q.apiKey ?? 'unused', SMTP_PASSWORD: 'unused', MEMORY_WARDEN_CONFIG: '', LOG_LEVEL: 'silent' }, timeout: 90_000,
      }).catch((e: { code?: number; stdout?: string; stderr?: string }) => e);
      expect('code' in r ? r.code : 0, `${job}: ${r.stdout}${r.stderr}\n${raw.slice(-3000)}`).toBe(0);
      await seen(`${job} done`, (l) => l.msg === 'job done' && l.job === job);
    }
    expect(lines.filter((l) => l.msg === 'job failed')).toEqual([]);

    // What it wrote is where the unit let it write: the store, the state db, the snapshot root.
    const db = new Database(join(storeDir, 'memory.db'), { readonly: true });
    expect(db.prepare('SELECT id FROM memory ORDER BY id').pluck().all()).toEqual(['keep']);
    db.close();
    expect(stateDb?.startsWith(`${stateDirectory}/`), `stateDb ${stateDb} is in the unit's state folder ${stateDirectory}`).toBe(true);
    const stateFile = join(state, stateDb!.slice(stateDirectory!.length + 1));
    expect(existsSync(stateFile)).toBe(true);
    const runs = new Database(stateFile, { readonly: true });
    expect(runs.prepare(`SELECT job, outcome FROM job_runs ORDER BY id`).all()).toEqual([
      { job: 'prune', outcome: 'ok' }, { job: 'integrity', outcome: 'ok' }, { job: 'snapshot', outcome: 'ok' },
    ]);
    runs.close();
    expect(readdirSync(join(backups, 'agent'), { withFileTypes: true }).filter((d) => d.isDirectory()).length).toBeGreaterThan(0); // the snapshot's folder

    worker.kill('SIGTERM'); // KillSignal=
    const code = await new Promise((r) => worker!.once('exit', (c) => r(c)));
    expect(code).toBe(0);
    await deletePrefix(redis.client, prefix);
  });
});
