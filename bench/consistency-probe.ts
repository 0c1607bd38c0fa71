/**
 * Preloaded (`node --import`) into each process the consistency benchmark measures: samples the JS heap every
 * few milliseconds and, on exit, writes the peaks and the process's max RSS to the file named by
 * MW_BENCH_PROBE. The peak heap is a sample (a spike between two samples can be missed); max RSS is the kernel's.
 */
import { writeFileSync } from 'node:fs';

const out = process.env.MW_BENCH_PROBE;
const peak = { heapUsed: 0, heapTotal: 0, external: 0 };

function sample(): void {
  const m = process.memoryUsage();
  peak.heapUsed = Math.max(peak.heapUsed, m.heapUsed);
  peak.heapTotal = Math.max(peak.heapTotal, m.heapTotal);
  peak.external = Math.max(peak.external, m.external);
}

if (out) {
  setInterval(sample, 5).unref();
  process.on('exit', () => {
    sample();
    writeFileSync(out, JSON.stringify({ maxRssBytes: process.resourceUsage().maxRSS * 1024, peakHeapUsed: peak.heapUsed, peakHeapTotal: peak.heapTotal, peakExternal: peak.external }));
  });
}
