/**
 * Writes test/durations.json from a vitest JSON report (`npx vitest run --reporter=json --outputFile=<report>`):
 * each test file's seconds in that run, the order a fresh clone starts them in (test/helpers/sequencer.ts).
 *
 *   node dist/scripts/test-durations.js <report.json>
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, relative, resolve, sep } from 'node:path';

const [report] = process.argv.slice(2);
if (!report) {
  console.error('usage: node dist/scripts/test-durations.js <vitest JSON report>');
  process.exit(2);
}
const root = resolve(import.meta.dirname, '../..');
const { testResults } = JSON.parse(readFileSync(report, 'utf8')) as { testResults: Array<{ name: string; startTime: number; endTime: number }> };
// The report's paths are those of the checkout it ran in: each is named from that checkout's root (the folder all
// the files lie under: test/ and examples/ beside each other).
let ranIn = dirname(testResults[0]?.name ?? root);
while (!testResults.every((r) => r.name.startsWith(ranIn + sep)) && ranIn !== dirname(ranIn)) ranIn = dirname(ranIn);
const seconds = Object.fromEntries(testResults
  .map((r) => [relative(ranIn, r.name), Math.max(1, Math.round((r.endTime - r.startTime) / 1000))] as const)
  .sort(([a], [b]) => (a < b ? -1 : 1)));
writeFileSync(resolve(root, 'test/durations.json'), `${JSON.stringify(seconds, null, 1)}\n`);
console.log(`wrote test/durations.json: ${Object.keys(seconds).length} files`);
