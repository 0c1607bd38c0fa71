import { SMTPServer, type SMTPServerOptions } from 'smtp-server';
import { simpleParser, type ParsedMail } from 'mailparser';
import type { AddressInfo } from 'node:net';

/**
 * A real SMTP server on a free loopback port (smtp-server), keeping every message it accepted, parsed with
 * mailparser. It can be made to refuse (4xx to DATA), to be down (closed: connection refused), to hold DATA
 * until released (a slow server, for concurrency), and to require a login.
 */
export interface ReceivedMail {
  envelope: { from: string; to: string[] };
  raw: string;
  parsed: ParsedMail;
}

export interface TestSmtp {
  host: string;
  port: number;
  received: ReceivedMail[];
  /** How many DATA commands arrived, accepted or not. */
  attempts: number;
  /** How many logins the client sent (user and password reached the server), accepted or not. */
  logins: number;
  /** How many messages arrived whole (their DATA ended), answered yet or held. */
  whole: number;
  /** The `smtp` config section that points at this server. */
  config(extra?: Record<string, unknown>): { host: string; port: number; secure: false; timeoutMs: number } & Record<string, unknown>;
  /** Answer DATA with this error (e.g. 451) until called with null. */
  refuse(code: number | null): void;
  /** Hold every DATA until the returned function is called. */
  hold(): () => void;
  /** Stop listening: clients get ECONNREFUSED. */
  down(): Promise<void>;
  /** Listen again on the same port. */
  up(): Promise<void>;
  close(): Promise<void>;
}

export async function startSmtp(opts: { auth?: { user: string; pass: string } } = {}): Promise<TestSmtp> {
  let refuseCode: number | null = null;
  let gate: Promise<void> | null = null;
  const state = { received: [] as ReceivedMail[], attempts: 0, whole: 0, logins: 0 };

  const options: SMTPServerOptions = {
    secure: false,
    disabledCommands: opts.auth ? ['STARTTLS'] : ['STARTTLS', 'AUTH'],
    authOptional: !opts.auth,
    allowInsecureAuth: true,
    logger: false,
    onAuth(auth, _session, cb) {
      state.logins += 1;
      if (opts.auth && auth.username === opts.auth.user && auth.password === opts.auth.pass) return cb(null, { user: auth.username });
      return cb(Object.assign(new Error('Invalid username or password'), { responseCode: 535 }));
    },
    onData(stream, session, cb) {
      state.attempts += 1;
      const refusal = refuseCode; // decided when the message arrives, even if it is held and released later
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        state.whole += 1;
        void (async () => {
          if (gate) await gate;
          if (refusal !== null) return cb(Object.assign(new Error('Try again later'), { responseCode: refusal }));
          const raw = Buffer.concat(chunks).toString('utf8');
          const parsed = await simpleParser(raw);
          state.received.push({
            envelope: {
              from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
              to: session.envelope.rcptTo.map((r) => r.address),
            },
            raw,
            parsed,
          });
          cb(null, 'queued');
        })().catch((err: Error) => cb(err));
      });
    },
  };

  // A client that dies mid-message (the crash tests SIGKILL a worker in DATA) resets its connection, and smtp-server
  // reports that as the server's 'error' event: unheard, an uncaught exception that fails the whole test file. A
  // client's error carries its remoteAddress; any other error still throws, unless listen() is waiting for it.
  const onError = (err: Error & { remoteAddress?: string }) => {
    if (err.remoteAddress === undefined && server.listenerCount('error') === 1) throw err;
  };
  let server = new SMTPServer(options).on('error', onError);
  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve((server.server.address() as AddressInfo).port);
      });
    });
  const stop = () => new Promise<void>((resolve) => server.close(() => resolve()));
  const port = await listen(0);
  let running = true;

  return {
    host: '127.0.0.1',
    port,
    get received() {
      return state.received;
    },
    get attempts() {
      return state.attempts;
    },
    get logins() {
      return state.logins;
    },
    get whole() {
      return state.whole;
    },
    config: (extra = {}) => ({ host: '127.0.0.1', port, secure: false, timeoutMs: 5000, ...extra }),
    refuse(code) {
      refuseCode = code;
    },
    hold() {
      let release!: () => void;
      gate = new Promise<void>((r) => (release = r));
      return () => {
        gate = null;
        release();
      };
    },
    async down() {
      if (!running) return;
      running = false;
      await stop();
    },
    async up() {
      if (running) return;
      server = new SMTPServer(options).on('error', onError);
      await listen(port);
      running = true;
    },
    async close() {
      if (running) {
        running = false;
        await stop();
      }
    },
  } as TestSmtp;
}
