// Preloaded (node --require) into a CLI process: kill -9 in the middle of deleting a folder. When a recursive
// rmSync is given an existing folder whose path holds MW_KILL_IN_RM, one file in it is removed, then SIGKILL.
const fs = require('node:fs');
const { join } = require('node:path');
const { syncBuiltinESMExports } = require('node:module');

const mark = process.env.MW_KILL_IN_RM;
const rmSync = fs.rmSync;
fs.rmSync = function (path, options) {
  if (mark && String(path).includes(mark) && options && options.recursive && fs.existsSync(path) && fs.lstatSync(path).isDirectory()) {
    const first = fs.readdirSync(path).filter((n) => n !== 'manifest.json').sort()[0];
    if (first) rmSync(join(String(path), first), { recursive: true, force: true });
    process.kill(process.pid, 'SIGKILL');
  }
  return rmSync.apply(this, arguments);
};
syncBuiltinESMExports();
