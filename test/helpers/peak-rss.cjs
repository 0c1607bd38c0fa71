// Preloaded (node --require) into a process a test measures from outside: at its exit, its peak resident memory
// (VmHWM, kB; Linux) written to the file MW_PEAK_RSS_FILE names. Workers load preloads too: only the main thread writes.
const { readFileSync, writeFileSync } = require('node:fs');
const { isMainThread } = require('node:worker_threads');

if (isMainThread && process.env.MW_PEAK_RSS_FILE) {
  const file = process.env.MW_PEAK_RSS_FILE;
  process.on('exit', () => writeFileSync(file, /VmHWM:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))[1]));
}
