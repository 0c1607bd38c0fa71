// `node --import ./test/helpers/code-cache-trace.mjs`: appends, for every vm.Script the process compiles, its file,
// whether it was given a code cache and whether V8 refused it, to the file CODE_CACHE_TRACE_OUT names, one JSON
// line each (test/launch.test.ts: the CLI's bundle compiles its chunks with the build's cache, src/launch.ts).
import vm from 'node:vm';
import { appendFileSync } from 'node:fs';

const out = process.env.CODE_CACHE_TRACE_OUT;
if (out) {
  const Script = vm.Script;
  vm.Script = class extends Script {
    constructor(code, options) {
      super(code, options);
      appendFileSync(out, `${JSON.stringify({ file: options?.filename, cached: options?.cachedData !== undefined, rejected: this.cachedDataRejected === true })}\n`);
    }
  };
}
