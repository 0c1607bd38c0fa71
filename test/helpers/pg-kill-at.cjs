// Preloaded (node --require) into a CLI process: kill -9 at one statement it sends to PostgreSQL, deterministically.
// MW_PG_KILL_AT, JSON: { "sql": "<regex>", "nth": 1, "when": "before" | "after" }: the nth query whose text matches
// the regex is the step; `before`: instead of sending it, `after`: once the server has answered it. Then SIGKILL.
// MW_PG_KILL_LOG, a file: each matching statement's first 80 characters are appended to it.
// `when: "hold"` (with `held`, a file): at the step nothing is sent and nothing answers, for good; the file is written
// once the process is there, for the test to act on it holding what it holds (its locks), then kill it.
// `when: "pause"` (with `held` and `resume`, files): as `hold`, but the statement is sent once the test has written
// `resume`: the test changes the database between two of the process's statements.
const fs = require('node:fs');
const pg = require('pg');

const spec = process.env.MW_PG_KILL_AT ? JSON.parse(process.env.MW_PG_KILL_AT) : null;
const logFile = process.env.MW_PG_KILL_LOG;
const pattern = spec ? new RegExp(spec.sql) : null;
let seen = 0;
const die = () => process.kill(process.pid, 'SIGKILL');
const query = pg.Client.prototype.query;
pg.Client.prototype.query = function (config, ...rest) {
  const text = typeof config === 'string' ? config : config && config.text;
  if (spec && typeof text === 'string' && pattern.test(text)) {
    seen++;
    if (logFile) fs.appendFileSync(logFile, `${text.replace(/\s+/g, ' ').slice(0, 80)}\n`);
    if (seen === (spec.nth ?? 1)) {
      if (spec.when === 'pause') {
        fs.writeFileSync(spec.held, text);
        const self = this;
        const later = new Promise((resolve) => {
          const t = setInterval(() => {
            if (!fs.existsSync(spec.resume)) return;
            clearInterval(t);
            resolve(query.call(self, config, ...rest));
          }, 20);
        });
        return typeof rest[rest.length - 1] === 'function' ? undefined : later;
      }
      if (spec.when === 'hold') {
        fs.writeFileSync(spec.held, text);
        return typeof rest[rest.length - 1] === 'function' ? undefined : new Promise(() => {});
      }
      if ((spec.when ?? 'before') === 'before') die();
      const out = query.call(this, config, ...rest);
      if (out && typeof out.then === 'function') return out.then((r) => (die(), r), (e) => (die(), Promise.reject(e)));
      return out;
    }
  }
  return query.call(this, config, ...rest);
};
