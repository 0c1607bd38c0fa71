/**
 * A reader that stops reading (`memory-warden review list | head -5`, `check | head -3`, a pager quit early) closes
 * the pipe under stdout or stderr; Node then emits EPIPE on the stream, and an `error` event nobody handles ends the
 * process with a stack trace. A closed pipe is not a failure of the command: what is still to be written goes
 * nowhere, the command finishes what it was doing (a prune or an erase is never cut short by its output's reader)
 * and exits with its own code, saying nothing. Any other error on these streams is left to Node, as before.
 * pino's own destination for the logs (fd 2) already drops its lines after EPIPE.
 */
export function quietOnClosedPipe(stream: NodeJS.WriteStream): void {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE' && err.code !== 'ERR_STREAM_DESTROYED') throw err;
    silence(stream);
  });
}

function silence(stream: NodeJS.WriteStream): void {
  stream.write = ((_chunk: unknown, encodingOrCb?: unknown, cb?: unknown): boolean => {
    const done = typeof encodingOrCb === 'function' ? encodingOrCb : cb;
    if (typeof done === 'function') queueMicrotask(() => (done as () => void)());
    return true;
  }) as NodeJS.WriteStream['write'];
}
