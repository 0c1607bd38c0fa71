import { readFileSync, writeFileSync } from 'node:fs';

/** This process's resident memory in kB: now (VmRSS), or at its highest since resetPeak() (VmHWM). Linux only. */
export const rssKb = (field: 'VmRSS' | 'VmHWM'): number =>
  Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync('/proc/self/status', 'utf8'))![1]);

/** Starts the peak (VmHWM) again from the current RSS (Linux: clear_refs 5). */
export const resetPeak = (): void => writeFileSync('/proc/self/clear_refs', '5');

/** How far this process's resident memory rose above where it stood, in kB, while `fn` ran. */
export async function peakGrowthKb<T>(fn: () => Promise<T>): Promise<{ value: T; grewKb: number }> {
  resetPeak();
  const before = rssKb('VmRSS');
  const value = await fn();
  return { value, grewKb: rssKb('VmHWM') - before };
}
