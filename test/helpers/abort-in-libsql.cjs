// Preloaded (node --require) into a worker: libsql's driver aborts the process (process.abort(), SIGABRT, as its
// Rust panics do) when a connection to a file whose path holds MW_ABORT_IN_LIBSQL prepares a statement that reads
// Mastra's messages. Inherited by every process the worker starts (NODE_OPTIONS).
const mark = process.env.MW_ABORT_IN_LIBSQL;
if (mark) {
  const id = require.resolve('libsql', { paths: [process.cwd()] });
  const Libsql = require(id);
  class Aborting extends Libsql {
    constructor(path, opts) {
      super(path, opts);
      this.aborts = String(path).includes(mark);
    }
    prepare(sql) {
      if (this.aborts && /mastra_messages/.test(sql)) process.abort();
      return super.prepare(sql);
    }
  }
  Object.assign(Aborting, Libsql);
  require.cache[id].exports = Aborting;
}
