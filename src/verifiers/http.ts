import { createHash } from 'node:crypto';
import { z } from '../vendor/zod.js';
import { defineVerifier } from './define.js';
import { select } from './select.js';
import { Refusal } from './types.js';

export const MAX_BODY_BYTES = 1024 * 1024;
const MAX_REDIRECTS = 5;

const params = z.strictObject({
  url: z.string().min(1),
  /** Header values come from the environment (`${TOKEN}`), never from memory text: the rule compiler enforces it. */
  headers: z.record(z.string(), z.string()).default({}),
  /** What the value is: the status code, a JSON path, a Prometheus sample, or the body text. */
  read: z.enum(['status', 'json', 'metric', 'body']).optional(),
  select: z.string().min(1).optional(),
  /** `pg_up{instance="db1"}`: the first sample with this name and these labels. */
  metric: z.string().min(1).optional(),
  /** With `metric`: the value of this label of the matched sample instead of the sample's value. */
  label: z.string().min(1).optional(),
  /** Statuses that count as a reading (default 2xx); anything else is unverifiable. Not used by `read: status`. */
  status: z.union([z.number().int(), z.array(z.number().int())]).optional(),
});
type Params = z.infer<typeof params>;

/** `host` or `host:port` as the WHATWG URL parser writes it (lower case, IPv4 normalised, IPv6 in brackets). */
function parseHostEntry(entry: string): { hostname: string; port?: string } | null {
  try {
    const u = new URL(`http://${entry}`);
    const explicitPort = /:(\d+)$/.exec(entry)?.[1];
    return explicitPort ? { hostname: u.hostname, port: String(Number(explicitPort)) } : { hostname: u.hostname };
  } catch {
    return null;
  }
}

const effectivePort = (u: URL) => u.port || (u.protocol === 'https:' ? '443' : '80');

/** The URL as it will be requested, or a refusal: http(s) only, no credentials, host (and port) on the allowlist. */
export function checkUrl(text: string, hosts: readonly string[]): URL {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    throw new Refusal(`not a URL: ${JSON.stringify(text.slice(0, 200))}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Refusal(`scheme ${u.protocol} is not allowed (http and https only)`);
  if (u.username || u.password) throw new Refusal('credentials in the URL are not allowed');
  const ok = hosts.some((h) => {
    const e = parseHostEntry(h.toLowerCase());
    return e !== null && e.hostname === u.hostname && (e.port === undefined || e.port === effectivePort(u));
  });
  if (!ok) throw new Refusal(`host ${u.host} is not on verify.allow.httpHosts`);
  return u;
}

interface HttpReading {
  url: string;
  status: number;
  contentType: string;
  body: string;
}

async function readCapped(res: Response, max: number): Promise<string> {
  if (!res.body) return '';
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > max) throw new Error(`response larger than ${max} bytes`);
    chunks.push(Buffer.from(chunk));
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** GET with redirects followed by hand: only to the same host and port, each target checked again. */
export async function guardedGet(url: URL, headers: Record<string, string>, hosts: readonly string[], signal: AbortSignal): Promise<HttpReading> {
  let current = url;
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    const res = await fetch(current, { method: 'GET', headers, redirect: 'manual', signal });
    const location = res.headers.get('location');
    if (res.status >= 300 && res.status < 400 && location) {
      await res.body?.cancel();
      const next = new URL(location, current);
      if (next.hostname !== current.hostname || effectivePort(next) !== effectivePort(current) || next.protocol !== current.protocol) {
        throw new Refusal(`${current.host} redirects to another host (${next.host}); not followed`);
      }
      current = checkUrl(next.href, hosts);
      continue;
    }
    return { url: current.href, status: res.status, contentType: res.headers.get('content-type') ?? '', body: await readCapped(res, MAX_BODY_BYTES) };
  }
  throw new Error(`more than ${MAX_REDIRECTS} redirects`);
}

const LABELS = /([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"/g;
const unescape = (v: string) => v.replace(/\\n/g, '\n').replace(/\\(["\\])/g, '$1');

function parseLabels(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (text) for (const m of text.matchAll(LABELS)) out[m[1]!] = unescape(m[2]!);
  return out;
}

const SAMPLE = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$/;

/** The first sample of Prometheus text format matching `name{label="v",…}`, with its labels. */
export function findSample(text: string, selector: string): { value: number; labels: Record<string, string> } | undefined {
  const sel = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?$/.exec(selector.trim());
  if (!sel) throw new Error(`metric selector ${JSON.stringify(selector)} is not name{label="value",…}`);
  const want = parseLabels(sel[2]);
  for (const line of text.split('\n')) {
    const m = SAMPLE.exec(line.trim());
    if (!m || m[1] !== sel[1]) continue;
    const labels = parseLabels(m[2]);
    if (Object.entries(want).every(([k, v]) => labels[k] === v)) return { value: Number(m[3]), labels };
  }
  return undefined;
}

function readingValue(p: Params, r: HttpReading): { value: unknown } | { missing: string } {
  const read = p.read ?? (p.select ? 'json' : p.metric ? 'metric' : 'body');
  if (read === 'status') return { value: r.status };
  if (read === 'body') return { value: r.body };
  if (read === 'json') {
    let doc: unknown;
    try {
      doc = JSON.parse(r.body);
    } catch {
      return { missing: 'response is not JSON' };
    }
    const v = p.select ? select(doc, p.select) : doc;
    return v === undefined ? { missing: `nothing at ${p.select}` } : { value: v };
  }
  if (!p.metric) return { missing: 'read: metric needs metric: NAME{labels}' };
  const sample = findSample(r.body, p.metric);
  if (!sample) return { missing: `no sample ${p.metric}` };
  if (p.label) return sample.labels[p.label] !== undefined ? { value: sample.labels[p.label] } : { missing: `sample has no label ${p.label}` };
  return { value: sample.value };
}

/** A monitoring endpoint: status, a JSON path, a Prometheus sample, or the body; only hosts on the allowlist. */
export default defineVerifier<Params>({
  name: 'http',
  description: 'GET an endpoint on verify.allow.httpHosts: status, JSON path, Prometheus sample or body',
  params,
  async verify({ params: p }, ctx) {
    const url = checkUrl(p.url, ctx.allow.httpHosts);
    const headerKey = createHash('sha256').update(JSON.stringify(Object.entries(p.headers).sort())).digest('hex').slice(0, 16);
    const r = await ctx.once(`http:${url.href}#${headerKey}`, () => guardedGet(url, p.headers, ctx.allow.httpHosts, ctx.signal));
    const evidence = { url: r.url, status: r.status };
    const okStatus = p.status === undefined ? r.status >= 200 && r.status < 300 : [p.status].flat().includes(r.status);
    if (p.read !== 'status' && !okStatus) return { verdict: 'unverifiable', reason: `${r.url} answered ${r.status}`, evidence };
    const got = readingValue(p, r);
    if ('missing' in got) return { verdict: 'unverifiable', reason: `${r.url}: ${got.missing}`, evidence };
    return { value: got.value, evidence };
  },
});
