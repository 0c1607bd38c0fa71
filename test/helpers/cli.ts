import { spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const CLI = fileURLToPath(new URL('../../dist/src/cli.js', import.meta.url));

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
  json<T = any>(): T;
}

/** Run the built CLI (npm test builds first) as a user would, with a private state db unless env says otherwise. */
export function cli(args: string[], env: Record<string, string> = {}): CliResult {
  const r: SpawnSyncReturns<string> = spawnSync(process.execPath, [CLI, ...args], {
    encoding: 'utf8',
    env: { ...process.env, LOG_LEVEL: 'silent', ...env },
    timeout: 60_000,
  });
  return {
    code: r.status ?? -1,
    stdout: r.stdout,
    stderr: r.stderr,
    json: () => JSON.parse(r.stdout),
  };
}

/**
 * cli() without blocking: for a command that needs a server this test process runs (SMTP on loopback), which
 * cannot answer while spawnSync holds the event loop.
 */
export function cliAsync(args: string[], env: Record<string, string> = {}, timeoutMs = 60_000): Promise<CliResult> {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, LOG_LEVEL: 'silent', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, stdout, stderr, json: () => JSON.parse(stdout) });
    }),
  );
}
