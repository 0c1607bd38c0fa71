// `node --import ./test/helpers/load-trace.mjs`: appends the path of every module the process loads, ESM and
// CommonJS alike, to the file LOAD_TRACE_OUT names (test/cli-startup.test.ts reads which packages a command loaded).
import Module, { register } from 'node:module';
import { appendFileSync } from 'node:fs';

const out = process.env.LOAD_TRACE_OUT;
if (out) {
  register(new URL('./load-trace-hooks.mjs', import.meta.url), { data: { out } });
  const load = Module._load;
  Module._load = function (request, parent, isMain) {
    const exports = load.apply(this, arguments);
    try {
      appendFileSync(out, `${Module._resolveFilename(request, parent, isMain)}\n`);
    } catch {
      // a builtin, or a name only the loader itself could resolve: not a package file
    }
    return exports;
  };
}
