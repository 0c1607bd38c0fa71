// Preloaded (node --require) into a CLI process: kill -9 at one step of what it changes, deterministically. The step
// is MW_KILL_AT, JSON: { "op": "write" | "delete", "path": "<regex>", "when": "after" | "before" | "during",
// "nth": 1 }. The nth operation of that kind on a path matching the regex is the step:
//   write:  a file renamed into place (fs.renameSync), copied (fs.copyFileSync), written (fs.writeFileSync, a
//           fs.createWriteStream that finished), put on SFTP (posixRename into place), or put on S3 (a PUT answered);
//   delete: a file or folder removed (fs.rmSync, fs.unlinkSync, fs.rmdirSync), on SFTP (delete, rmdir), or on S3 (a
//           DELETE answered).
// `after` (default): once it is done; `before`: instead of doing it; `during` (a recursive fs.rmSync only): after
// removing one entry of the folder. Then SIGKILL. MW_KILL_LOG, a file: each matching operation is appended to it (so
// a test can see how many steps there are).
const fs = require('node:fs');
const http = require('node:http');
const { join } = require('node:path');
const { syncBuiltinESMExports } = require('node:module');

const spec = process.env.MW_KILL_AT ? JSON.parse(process.env.MW_KILL_AT) : null;
const logFile = process.env.MW_KILL_LOG;
const pattern = spec ? new RegExp(spec.path) : null;
const when = spec?.when ?? 'after';
let seen = 0;
const append = fs.appendFileSync;

/** Whether this operation is the step (counted as seen). */
function isStep(op, path) {
  if (!spec || op !== spec.op || !pattern.test(String(path))) return false;
  seen++;
  if (logFile) append(logFile, `${op} ${path}\n`);
  return seen === (spec.nth ?? 1);
}
const die = () => process.kill(process.pid, 'SIGKILL');

/** Wrap fn so that the step (as `op` on the path `at(args)`) kills before or after it. */
function hook(target, name, op, at) {
  const orig = target[name];
  target[name] = function (...args) {
    const step = isStep(op, at(args));
    if (step && when === 'before') die();
    if (step && when === 'during' && name === 'rmSync' && fs.existsSync(args[0]) && fs.lstatSync(args[0]).isDirectory()) {
      const first = fs.readdirSync(args[0]).sort()[0];
      if (first) orig.call(this, join(String(args[0]), first), { recursive: true, force: true });
      die();
    }
    const out = orig.apply(this, args);
    if (step && out && typeof out.then === 'function') return out.then((v) => (die(), v));
    if (step) die();
    return out;
  };
}

if (spec) {
  hook(fs, 'renameSync', 'write', (a) => a[1]);
  hook(fs, 'copyFileSync', 'write', (a) => a[1]);
  hook(fs, 'writeFileSync', 'write', (a) => a[0]);
  hook(fs, 'rmSync', 'delete', (a) => a[0]);
  hook(fs, 'unlinkSync', 'delete', (a) => a[0]);
  hook(fs, 'rmdirSync', 'delete', (a) => a[0]);
  const createWriteStream = fs.createWriteStream;
  fs.createWriteStream = function (path, ...rest) {
    const s = createWriteStream.call(this, path, ...rest);
    if (typeof path === 'string' && spec.op === 'write' && pattern.test(path)) {
      if (isStep('write', path)) {
        if (when === 'before') die();
        s.once('finish', die);
      }
    }
    return s;
  };
  syncBuiltinESMExports();

  // S3: the request, once the storage has answered it (it did what was asked).
  const request = http.request;
  http.request = function (...args) {
    const req = request.apply(this, args);
    const opts = typeof args[0] === 'object' && !(args[0] instanceof URL) ? args[0] : args[1] ?? {};
    const op = opts.method === 'DELETE' ? 'delete' : opts.method === 'PUT' ? 'write' : null;
    const path = decodeURIComponent(String(opts.path ?? '').split('?')[0]);
    if (op && isStep(op, path)) {
      if (when === 'before') die();
      req.once('response', die);
    }
    return req;
  };
  syncBuiltinESMExports();

  // SFTP: ssh2-sftp-client as the CLI loads it (the same module, from the project's node_modules).
  if (spec.sftp) {
    const Client = require(require.resolve('ssh2-sftp-client', { paths: [process.cwd()] }));
    hook(Client.prototype, 'delete', 'delete', (a) => a[0]);
    hook(Client.prototype, 'rmdir', 'delete', (a) => a[0]);
    hook(Client.prototype, 'posixRename', 'write', (a) => a[1]);
  }
}
