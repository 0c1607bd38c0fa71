import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
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
