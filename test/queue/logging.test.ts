import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { join } from 'node:path';
import { createLogger, scrubUrlCredentials } from '../../src/log/logger.js';
import { redactRedisUrl } from '../../src/queue/connection.js';
import { startWorker } from '../../src/queue/worker.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { loadTestConfig, makeStore, tempDir, until, type LogLine } from './fixtures.js';

const SECRETS = ['redis-pass-1', 'smtp-pass-2', 'qdrant-key-3', 'bearer-4'];

function capture() {
  const raw: string[] = [];
  const log = createLogger({ level: 'debug', destination: { write: (s: string) => raw.push(s) } as unknown as NodeJS.WritableStream });
  return { log, raw, lines: () => raw.map((s) => JSON.parse(s) as LogLine) };
}

describe('secrets never reach the logs', () => {
  it('blanks secret fields at any usual depth: passwords, API keys, tokens, authorization headers', () => {
    const { log, raw } = capture();
    log.info({ smtp: { host: 'mail', password: SECRETS[1] } }, 'smtp');
    log.info({ config: { smtp: { password: SECRETS[1] }, stores: { agent: { qdrant: { apiKey: SECRETS[2] } } } } }, 'whole config');
    log.info({ store: 'agent', qdrant: { url: 'http://q:6333', apiKey: SECRETS[2] } }, 'qdrant');
    log.info({ request: { headers: { authorization: `Bearer ${SECRETS[3]}` } } }, 'http');
    log.child({ job: 'digest' }).info({ password: SECRETS[1] }, 'child logger');
    const text = raw.join('');
    for (const s of SECRETS) expect(text).not.toContain(s);
    expect(text).toContain('[redacted]');
    expect(text).toContain('http://q:6333'); // only the secret goes, not the rest
  });

  it('blanks passwords inside URLs in messages, fields, nested values and errors, also from child loggers', () => {
    const { log, raw, lines } = capture();
    const url = `redis://:${SECRETS[0]}@redis.internal:6379/0`;
    log.info({ redis: url }, 'connecting');
    log.info(`connecting to ${url}`);
    log.error({ err: new Error(`connect failed: ${url}`) }, 'failed');
    log.child({ job: 'prune' }).warn({ nested: { list: [url] } }, 'nested');
    log.info('format %s', url);
    const text = raw.join('');
    expect(text).not.toContain(SECRETS[0]);
    expect(lines()[0]!.redis).toBe('redis://:[redacted]@redis.internal:6379/0');
    expect((lines()[2]!.err as { message: string; type: string }).message).toBe('connect failed: redis://:[redacted]@redis.internal:6379/0');
    expect((lines()[2]!.err as { type: string }).type).toBe('Error');
  });

  it('leaves URLs without credentials and plain text alone', () => {
    expect(scrubUrlCredentials('see http://example.org/a:b@c and user@host')).toBe('see http://example.org/a:b@c and user@host');
    expect(scrubUrlCredentials({ a: ['smtp://u:p@h:25'] })).toEqual({ a: ['smtp://u:[redacted]@h:25'] });
    // a password holding @ (ioredis reads it to the last @ before the host): all of it
    expect(scrubUrlCredentials('to redis://:Pw@Zq7Secret22x@cache:6379/0 now')).toBe('to redis://:[redacted]@cache:6379/0 now');
    expect(scrubUrlCredentials('redis://u:a@b:c@cache and me@example.org')).toBe('redis://u:[redacted]@cache and me@example.org');
    expect(redactRedisUrl('redis://user:pw@h:6380/2')).toBe('redis://user:***@h:6380/2');
    expect(redactRedisUrl('redis://h:6379')).toBe('redis://h:6379');
  });

  describe('a worker whose Redis URL carries a password', () => {
    let redis: TestRedis;
    const prefix = uniquePrefix('logging');
    beforeAll(async () => {
      redis = await startTestRedis();
    });
    afterAll(async () => {
      await deletePrefix(redis.client, prefix);
      await redis.stop();
    });

    it('logs its connection and jobs without the password', async () => {
      // The test Redis has no password; ioredis then ignores the one in the URL (with a console warning), so the
      // secret travels through the worker's config and connection without being checked, exactly as in production.
      const dir = tempDir('logging');
      const config = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores: { agent: makeStore(join(dir, 'agent.db'), { expired: 1 }) } });
      config.redis.url = config.redis.url.replace('redis://', `redis://:${SECRETS[0]}@`);
      config.smtp = { host: 'mail', port: 587, secure: false, user: 'warden', password: SECRETS[1], timeoutMs: 1000 } as typeof config.smtp;
      const { log, raw, lines } = capture();
      const w = await startWorker({ jobs: JOBS, config, log });
      try {
        await w.queue.add('prune', { store: 'agent' });
        await until('the job to finish', () => lines().find((l) => l.msg === 'job done'));
        log.info({ config }, 'effective config'); // even a careless line with the whole config
      } finally {
        await w.shutdown('test');
      }
      const text = raw.join('');
      expect(text).toContain('worker ready');
      for (const s of SECRETS.slice(0, 2)) expect(text).not.toContain(s);
    });
  });
});
