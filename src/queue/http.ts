import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../log/logger.js';

export interface Health {
  ok: boolean;
  [key: string]: unknown;
}

export interface HttpOptions {
  host: string;
  port: number;
  metrics: () => Promise<{ contentType: string; body: string }>;
  health: () => Promise<Health>;
  log: Logger;
}

export interface HttpHandle {
  server: Server;
  /** `http://127.0.0.1:9477` as actually bound (port 0 becomes a real port). */
  url: string;
  close(): Promise<void>;
}

/**
 * `/metrics` (Prometheus text) and `/healthz` (JSON; 200 when healthy, 503 when not). Loopback by default: the
 * figures name the stores, which is nobody else's business.
 */
export async function startHttpServer(opts: HttpOptions): Promise<HttpHandle> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const reply = async () => {
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { allow: 'GET, HEAD' }).end();
      } else if (path === '/metrics') {
        const { contentType, body } = await opts.metrics();
        res.writeHead(200, { 'content-type': contentType }).end(req.method === 'HEAD' ? undefined : body);
      } else if (path === '/healthz') {
        const health = await opts.health();
        res.writeHead(health.ok ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify(health) + '\n');
      } else {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics or /healthz\n');
      }
    };
    reply().catch((err: unknown) => {
      opts.log.error({ path, err: (err as Error).message }, 'http request failed');
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('internal error\n');
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `http://${host}:${addr.port}`;
  opts.log.info({ url }, 'http listening (/metrics, /healthz)');
  return {
    server,
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
