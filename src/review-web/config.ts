import { z } from '../vendor/zod.js';
import { pathField } from '../config/path-field.js';
import { parseSubnet } from './proxies.js';

/**
 * The review page's keys, under `review:` beside afterDays and batch. Without `url` the digest keeps its shell
 * commands; `memory-warden serve` still serves the page to whoever opens it with a link from `serve --link`.
 */
export const reviewWebShape = {
  url: z
    .url({ protocol: /^https?$/ })
    // The protocol check above, said where config/schema.json can carry it (a url check alone takes javascript:…).
    .meta({ pattern: '^\\s*[Hh][Tt][Tt][Pp][Ss]?://[^\\s/?#]' })
    .optional()
    .describe('The page\'s address as readers reach it (through the reverse proxy, if any); digest links start here.'),
  secretEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name').default('MEMORY_WARDEN_REVIEW_KEY')
    .describe('The environment variable holding the key that signs links (at least 32 characters).'),
  tokenDays: z.number().positive().max(90).default(7).describe('How long a digest link opens the page.'),
  sessionHours: z.number().positive().max(24 * 30).default(12)
    .describe('How long a signed-in session lasts without a new link.'),
  listen: z
    .strictObject({
      host: z.string().min(1).default('127.0.0.1')
        .describe('Address the review page listens on: loopback by default; put a reverse proxy in front to expose it to a team.'),
      port: z.number().int().min(0).max(65535).default(9478).describe('Port of the review page.'),
    })
    .prefault({}),
  auth: z
    .strictObject({
      mode: z.enum(['proxy', 'password', 'users']).default('password')
        .describe('proxy: a reverse proxy with its own login; password: one shared password; users: names and hashed passwords from a file.'),
      userHeader: z.string().regex(/^[A-Za-z0-9-]+$/, 'an HTTP header name').optional()
        .describe('proxy mode: the header naming the signed-in user (X-Forwarded-User); trusted only when set here.'),
      passwordEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name').default('MEMORY_WARDEN_REVIEW_PASSWORD')
        .describe('password mode: the environment variable holding the shared password.'),
      usersFile: pathField().optional()
        .describe('users mode: a file of `name:scrypt:salt:hash` lines (`memory-warden serve --hash-password NAME` writes one).'),
      clientHeader: z.string().regex(/^[A-Za-z0-9-]+$/, 'an HTTP header name').optional()
        .describe('password and users modes behind a reverse proxy: the header the proxy sets to the client\'s address (X-Forwarded-For, whose last entry is read, or X-Real-IP); trusted only when set here. The sign-in limits count per client address; without it, behind a proxy, every client is the proxy\'s address.'),
      trustedProxies: z.array(z.string().refine((t) => parseSubnet(t) !== null, 'an IP address or subnet (10.0.0.7, 10.0.0.0/8, fd00::/8)')).min(1).optional()
        .describe('The reverse proxies whose userHeader and clientHeader are read (addresses or subnets: 10.0.0.7, fd00::/8); a request from any other address has them ignored (proxy mode: it is not signed in). Unset: loopback only, and `serve` then refuses to listen beyond loopback in proxy mode or with a clientHeader.'),
    })
    .prefault({}),
};

export type ReviewWebConfig = {
  [K in keyof typeof reviewWebShape]: z.output<(typeof reviewWebShape)[K]>;
};
