import { afterEach } from 'vitest';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const WRITER = fileURLToPath(new URL('../../dist/bench/agent-writer.js', import.meta.url));

export interface WriterSummary { writes: number; errors: number; firstError: string | null }

/** Writers still running when a test ends (it failed or timed out): killed after each test, never left behind. */
const running = new Set<ReturnType<typeof spawn>>();
afterEach(() => {
  for (const writer of running) writer.kill('SIGKILL');
  running.clear();
});

/** The agent-like writer of the benchmark in its own process, inserting a row every `intervalMs` (default 1). */
export async function startAgent(db: string, intervalMs = 1): Promise<{ stop(): Promise<WriterSummary> }> {
  const writer = spawn(process.execPath, [WRITER, db, String(intervalMs)], { stdio: ['ignore', 'pipe', 'inherit'] });
  running.add(writer);
  let out = '';
  writer.stdout.on('data', (d) => (out += d));
  await new Promise<void>((resolve) => writer.stdout.once('data', () => resolve()));
  return {
    async stop() {
      writer.kill('SIGTERM');
      await new Promise((resolve) => writer.once('exit', resolve));
      running.delete(writer);
      return JSON.parse(out.split('\n').filter(Boolean).at(-1)!) as WriterSummary;
    },
  };
}
