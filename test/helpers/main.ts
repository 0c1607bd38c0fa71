import { vi } from 'vitest';
import { main } from '../../src/program.js';

/**
 * The command line in this process (src/program.ts main), with what it wrote to stdout and stderr: much quicker
 * than the built CLI where one test runs many commands. process.exitCode is a command's exit code and would
 * outlive it here; it is cleared before and after.
 */
export async function runMain(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => ((stdout += String(chunk)), true));
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => ((stderr += String(chunk)), true));
  process.exitCode = undefined;
  try {
    return { code: await main(['node', 'memory-warden', ...argv]), stdout, stderr };
  } finally {
    process.exitCode = undefined;
    out.mockRestore();
    err.mockRestore();
  }
}
