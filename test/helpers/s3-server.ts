import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A minimal S3-compatible server on a loopback port: the calls memory-warden's S3 target makes (Put/Get/Head/
 * Delete object, ListObjectsV2, multipart create/upload part/complete/abort/list), path-style, in memory. It checks
 * what the SDK sends as S3 would: the SigV4 Authorization header names the expected access key, a signed
 * `x-amz-content-sha256` equals the body's sha256, `x-amz-checksum-sha256` equals the body's (BadDigest if not),
 * parts but the last are at least 5 MiB, completed parts exist with the ETag and checksum given. It does not
 * verify the SigV4 signature itself, nor keep versions, ACLs or storage classes.
 *
 * `faults` lets a test make the next matching requests fail (HTTP status), hang (no answer), store one thing and
 * report another checksum, size or ETag, store other bytes than it received (`store-other`: its ETag is the md5 of
 * what it keeps, its checksum the one it was sent; `-lying`: both are what was sent), answer a GET with an endless
 * stream, or run a hook (e.g. kill the uploading process). `lacks` makes it implement less,
 * as S3-compatible stores do: no ListMultipartUploads (501), no AbortMultipartUpload (405), no multipart uploads
 * at all (501), no checksums (ignored, never echoed), a 501 for any request carrying a checksum header, or no byte
 * ranges (a Range header ignored: the whole object, 200). Like S3
 * it refuses a body that does not match its Content-MD5 (BadDigest), unless `ignoresContentMd5` (as s3rver).
 */
export interface S3ServerOptions {
  bucket?: string;
  accessKeyId?: string;
  lacks?: Array<'list-uploads' | 'abort-upload' | 'multipart' | 'checksums' | 'checksum-headers' | 'range'>;
  ignoresContentMd5?: boolean;
  /**
   * How a multipart object's sha256 is reported: S3's composite `<sha256 of the parts' sha256s>-N` (default), the
   * composite without `-N` (moto 5.2.1), or the whole object's sha256.
   */
  multipartChecksum?: 'composite-n' | 'composite' | 'whole';
}

export interface S3Object {
  body: Buffer;
  /** The ETag it reports, when not the md5 of `body` (a storage that lies). */
  etag?: string;
  checksum?: string;
  metadata: Record<string, string>;
}

export interface S3Request {
  method: string;
  key: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  /** For an `endless` answer: bytes written so far, and settled when the client has closed the connection. */
  streamed?: number;
  hungUp?: Promise<void>;
}

export interface S3Fault {
  match: (r: S3Request) => boolean;
  action: { status: number } | 'hang' | 'wrong-checksum' | 'wrong-size' | 'wrong-etag' | 'store-other' | 'store-other-lying' | 'endless' | ((r: S3Request) => void);
  /** How many matching requests it applies to (default 1). */
  times?: number;
}

export interface TestS3 {
  endpoint: string;
  bucket: string;
  accessKeyId: string;
  secretAccessKey: string;
  objects: Map<string, S3Object>;
  uploads: Map<string, { key: string; parts: Map<number, { body: Buffer; checksum?: string; etag: string }> }>;
  faults: S3Fault[];
  /** Every request seen, for assertions: method and key. */
  log: S3Request[];
  /** Flip one byte of a stored object, as bit rot would (the stored checksum stays what it was). */
  corrupt(key: string): void;
  stop(): Promise<void>;
}

const MIN_PART = 5 * 1024 * 1024;
const xmlEscape = (s: string) => s.replace(/[<>&'"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' })[c]!);
const b64sha = (b: Buffer) => createHash('sha256').update(b).digest('base64');
const md5 = (b: Buffer) => `"${createHash('md5').update(b).digest('hex')}"`;

export async function startS3Server(opts: S3ServerOptions = {}): Promise<TestS3> {
  const bucket = opts.bucket ?? 'mw-test';
  const accessKeyId = opts.accessKeyId ?? `AKTEST${randomBytes(6).toString('hex').toUpperCase()}`;
  const s3: Omit<TestS3, 'endpoint' | 'stop'> = {
    bucket, accessKeyId, secretAccessKey: randomBytes(20).toString('hex'),
    objects: new Map(), uploads: new Map(), faults: [], log: [],
    corrupt(key) {
      const o = s3.objects.get(key);
      if (!o || o.body.length === 0) throw new Error(`test S3: no object ${key} to corrupt`);
      o.body = Buffer.from(o.body);
      o.body[Math.floor(o.body.length / 2)]! ^= 0xff;
    },
  };
  const hung: ServerResponse[] = [];
  const server: Server = createServer((req, res) => {
    handle(s3, opts, req, res, hung).catch((err: Error) => sendError(res, 500, 'InternalError', err.message));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    ...s3,
    endpoint: `http://127.0.0.1:${port}`,
    stop: async () => {
      for (const r of hung) r.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  } as TestS3;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

function sendError(res: ServerResponse, status: number, code: string, message: string): void {
  if (res.headersSent) return void res.destroy();
  res.writeHead(status, { 'content-type': 'application/xml' });
  res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${xmlEscape(message)}</Message></Error>`);
}

function sendXml(res: ServerResponse, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(200, { 'content-type': 'application/xml', ...headers });
  res.end(`<?xml version="1.0" encoding="UTF-8"?>${body}`);
}

async function handle(s3: Omit<TestS3, 'endpoint' | 'stop'>, opts: S3ServerOptions, req: IncomingMessage, res: ServerResponse, hung: ServerResponse[]): Promise<void> {
  const url = new URL(req.url!, 'http://x');
  const [, bucket, ...rest] = url.pathname.split('/');
  const key = decodeURIComponent(rest.join('/'));
  const r: S3Request = { method: req.method!, key, query: url.searchParams, headers: req.headers };
  s3.log.push(r);
  const auth = req.headers.authorization ?? '';
  if (!auth.startsWith(`AWS4-HMAC-SHA256 Credential=${s3.accessKeyId}/`)) return sendError(res, 403, 'InvalidAccessKeyId', 'unknown access key');
  if (bucket !== s3.bucket) return sendError(res, 404, 'NoSuchBucket', `no bucket ${bucket}`);
  const body = await readBody(req);
  // Each digest of the body made once, however many headers and answers use it.
  let sha: Buffer | undefined;
  let md5Raw: Buffer | undefined;
  const bodySha = () => (sha ??= createHash('sha256').update(body).digest());
  const bodyMd5 = () => (md5Raw ??= createHash('md5').update(body).digest());
  const contentSha = String(req.headers['x-amz-content-sha256'] ?? '');
  if (contentSha.startsWith('STREAMING-')) return sendError(res, 501, 'NotImplemented', 'aws-chunked bodies are not accepted here');
  if (contentSha && contentSha !== 'UNSIGNED-PAYLOAD' && contentSha !== bodySha().toString('hex')) {
    return sendError(res, 400, 'XAmzContentSHA256Mismatch', 'x-amz-content-sha256 does not match the body');
  }
  const lacks = new Set(opts.lacks ?? []);
  if (lacks.has('checksum-headers') && Object.keys(req.headers).some((h) => h.startsWith('x-amz-checksum-'))) {
    return sendError(res, 501, 'NotImplemented', 'checksum headers are not implemented');
  }
  const fault = s3.faults.find((f) => (f.times ?? 1) > 0 && f.match(r));
  const lie = fault && typeof fault.action === 'string' ? fault.action : undefined;
  if (fault) {
    fault.times = (fault.times ?? 1) - 1;
    if (fault.action === 'hang') return void hung.push(res);
    if (fault.action === 'endless') return endless(r, res);
    if (typeof fault.action === 'function') fault.action(r);
    else if (typeof fault.action === 'object') return sendError(res, fault.action.status, fault.action.status === 503 ? 'SlowDown' : 'InternalError', 'fault injected by the test');
  }
  const sentChecksum = lacks.has('checksums') ? undefined : (req.headers['x-amz-checksum-sha256'] as string | undefined);
  if (sentChecksum !== undefined && sentChecksum !== bodySha().toString('base64')) return sendError(res, 400, 'BadDigest', 'x-amz-checksum-sha256 does not match the body');
  const contentMd5 = req.headers['content-md5'] as string | undefined;
  if (!opts.ignoresContentMd5 && contentMd5 !== undefined && contentMd5 !== bodyMd5().toString('base64')) {
    return sendError(res, 400, 'BadDigest', 'The Content-MD5 you specified did not match what we received.');
  }
  const report = (c: string | undefined) => (c && lie === 'wrong-checksum' ? b64sha(Buffer.from('not what was sent')) : c);
  // A storage that keeps other bytes than it received, and says it keeps what was sent.
  const kept = (lie === 'store-other' || lie === 'store-other-lying') && body.length > 0 ? Buffer.concat([body.subarray(0, -1), Buffer.from([body.at(-1)! ^ 0xff])]) : body;
  const q = url.searchParams;

  if (!key) {
    if (req.method === 'GET' && q.has('uploads')) {
      if (lacks.has('list-uploads')) return sendError(res, 501, 'NotImplemented', 'A parameter you provided implies functionality that is not implemented');
      return listUploads(s3, q, res);
    }
    if (req.method === 'GET' && q.get('list-type') === '2') return listObjects(s3, q, res);
    return sendError(res, 501, 'NotImplemented', `${req.method} on the bucket with ${url.search}`);
  }
  if (req.method === 'POST' && q.has('uploads')) {
    if (lacks.has('multipart')) return sendError(res, 501, 'NotImplemented', 'multipart uploads are not implemented');
    const id = randomBytes(12).toString('hex');
    s3.uploads.set(id, { key, parts: new Map() });
    return sendXml(res, `<InitiateMultipartUploadResult><Bucket>${s3.bucket}</Bucket><Key>${xmlEscape(key)}</Key><UploadId>${id}</UploadId></InitiateMultipartUploadResult>`,
      req.headers['x-amz-checksum-algorithm'] ? { 'x-amz-checksum-algorithm': String(req.headers['x-amz-checksum-algorithm']) } : {});
  }
  const uploadId = q.get('uploadId');
  if (uploadId !== null) {
    const up = s3.uploads.get(uploadId);
    if (!up || up.key !== key) return sendError(res, 404, 'NoSuchUpload', 'no such upload');
    if (req.method === 'PUT') {
      const n = Number(q.get('partNumber'));
      const etag = lie === 'store-other' ? md5(kept) : `"${bodyMd5().toString('hex')}"`;
      up.parts.set(n, { body: kept, checksum: sentChecksum, etag });
      res.writeHead(200, { etag, ...(sentChecksum ? { 'x-amz-checksum-sha256': report(sentChecksum)! } : {}) });
      return void res.end();
    }
    if (req.method === 'DELETE') {
      if (lacks.has('abort-upload')) return sendError(res, 405, 'MethodNotAllowed', 'The specified method is not allowed against this resource.');
      s3.uploads.delete(uploadId);
      res.writeHead(204);
      return void res.end();
    }
    if (req.method === 'POST') return complete(s3, key, uploadId, body.toString('utf8'), res, report, opts.multipartChecksum ?? 'composite-n');
  }
  if (req.method === 'PUT') {
    const metadata = Object.fromEntries(Object.entries(req.headers).filter(([h]) => h.startsWith('x-amz-meta-')).map(([h, v]) => [h.slice(11), String(v)]));
    s3.objects.set(key, { body: kept, checksum: sentChecksum, metadata, ...(lie === 'store-other-lying' ? { etag: md5(body) } : {}) });
    res.writeHead(200, { etag: lie === 'store-other' ? md5(kept) : `"${bodyMd5().toString('hex')}"`, ...(sentChecksum ? { 'x-amz-checksum-sha256': report(sentChecksum)! } : {}) });
    return void res.end();
  }
  const o = s3.objects.get(key);
  if (req.method === 'DELETE') {
    s3.objects.delete(key);
    res.writeHead(204);
    return void res.end();
  }
  if (!o) {
    if (req.method === 'HEAD') return void (res.writeHead(404), res.end());
    return sendError(res, 404, 'NoSuchKey', 'The specified key does not exist.');
  }
  const headers: Record<string, string> = {
    'content-length': String(o.body.length + (lie === 'wrong-size' && req.method === 'HEAD' ? 1 : 0)),
    etag: lie === 'wrong-etag' ? md5(Buffer.from('not what is stored')) : (o.etag ?? md5(o.body)),
    'last-modified': new Date().toUTCString(), 'content-type': 'application/octet-stream' };
  if (req.headers['x-amz-checksum-mode'] === 'ENABLED' && o.checksum) headers['x-amz-checksum-sha256'] = report(o.checksum)!;
  for (const [k, v] of Object.entries(o.metadata)) headers[`x-amz-meta-${k}`] = v;
  const range = /^bytes=(\d+)-(\d*)$/.exec(String(req.headers.range ?? ''));
  if (range && req.method === 'GET' && !lacks.has('range') && lie === undefined) {
    const start = Number(range[1]);
    const end = Math.min(range[2] ? Number(range[2]) : Infinity, o.body.length - 1);
    if (start >= o.body.length) return sendError(res, 416, 'InvalidRange', 'The requested range is not satisfiable');
    res.writeHead(206, { ...headers, 'content-range': `bytes ${start}-${end}/${o.body.length}`, 'content-length': String(end - start + 1) });
    return void res.end(o.body.subarray(start, end + 1));
  }
  res.writeHead(200, headers);
  res.end(req.method === 'HEAD' ? undefined : o.body);
}

/** Zeros for ever, without a length, as an object linked to /dev/zero would be served: until the client hangs up. */
function endless(r: S3Request, res: ServerResponse): void {
  const zeros = Buffer.alloc(64 * 1024);
  r.streamed = 0;
  r.hungUp = new Promise((resolve) => res.once('close', resolve));
  res.writeHead(200, { 'content-type': 'application/octet-stream', etag: '"0"' });
  const more = () => {
    while (!res.destroyed && r.streamed! < 1024 ** 4) {
      r.streamed! += zeros.length;
      if (!res.write(zeros)) return void res.once('drain', more);
    }
  };
  more();
}

function complete(s3: Omit<TestS3, 'endpoint' | 'stop'>, key: string, uploadId: string, xml: string, res: ServerResponse, report: (c?: string) => string | undefined, form: NonNullable<S3ServerOptions['multipartChecksum']>): void {
  const up = s3.uploads.get(uploadId)!;
  const listed = [...xml.matchAll(/<Part>([\s\S]*?)<\/Part>/g)].map((m) => ({
    n: Number(/<PartNumber>(\d+)<\/PartNumber>/.exec(m[1]!)?.[1]),
    etag: /<ETag>(.*?)<\/ETag>/.exec(m[1]!)?.[1]?.replace(/&quot;/g, '"'),
    checksum: /<ChecksumSHA256>(.*?)<\/ChecksumSHA256>/.exec(m[1]!)?.[1],
  }));
  if (listed.length === 0) return sendError(res, 400, 'MalformedXML', 'no parts');
  const bodies: Buffer[] = [];
  const digests: Buffer[] = [];
  for (const [i, p] of listed.entries()) {
    const part = up.parts.get(p.n);
    if (!part || part.etag !== p.etag) return sendError(res, 400, 'InvalidPart', `part ${p.n} not uploaded with that ETag`);
    if (i > 0 && listed[i - 1]!.n >= p.n) return sendError(res, 400, 'InvalidPartOrder', 'parts out of order');
    if (part.checksum !== undefined && p.checksum !== part.checksum) return sendError(res, 400, 'InvalidPart', `part ${p.n}: checksum differs from the upload's`);
    if (i < listed.length - 1 && part.body.length < MIN_PART) return sendError(res, 400, 'EntityTooSmall', `part ${p.n} is ${part.body.length} bytes`);
    bodies.push(part.body);
    if (part.checksum) digests.push(Buffer.from(part.checksum, 'base64'));
  }
  const forms = { 'composite-n': () => `${b64sha(Buffer.concat(digests))}-${digests.length}`, composite: () => b64sha(Buffer.concat(digests)), whole: () => b64sha(Buffer.concat(bodies)) };
  const checksum = digests.length === listed.length ? forms[form]() : undefined;
  // S3's multipart ETag: the md5 of the parts' md5s, and their count.
  const etags = listed.map((p) => Buffer.from(up.parts.get(p.n)!.etag.replace(/"/g, ''), 'hex'));
  const etag = `"${createHash('md5').update(Buffer.concat(etags)).digest('hex')}-${listed.length}"`;
  s3.objects.set(key, { body: Buffer.concat(bodies), checksum, metadata: {}, etag });
  s3.uploads.delete(uploadId);
  sendXml(res, `<CompleteMultipartUploadResult><Bucket>${s3.bucket}</Bucket><Key>${xmlEscape(key)}</Key><ETag>${xmlEscape(etag)}</ETag>${checksum ? `<ChecksumSHA256>${report(checksum)}</ChecksumSHA256>` : ''}</CompleteMultipartUploadResult>`);
}

function listObjects(s3: Omit<TestS3, 'endpoint' | 'stop'>, q: URLSearchParams, res: ServerResponse): void {
  const prefix = q.get('prefix') ?? '';
  const max = Number(q.get('max-keys') ?? 1000);
  const after = q.get('continuation-token') ?? '';
  const keys = [...s3.objects.keys()].filter((k) => k.startsWith(prefix) && k > after).sort();
  const page = keys.slice(0, max);
  const truncated = keys.length > page.length;
  const contents = page.map((k) => `<Contents><Key>${xmlEscape(k)}</Key><Size>${s3.objects.get(k)!.body.length}</Size><ETag>${xmlEscape(md5(s3.objects.get(k)!.body))}</ETag><LastModified>${new Date().toISOString()}</LastModified></Contents>`).join('');
  sendXml(res, `<ListBucketResult><Name>${s3.bucket}</Name><Prefix>${xmlEscape(prefix)}</Prefix><KeyCount>${page.length}</KeyCount><MaxKeys>${max}</MaxKeys><IsTruncated>${truncated}</IsTruncated>${truncated ? `<NextContinuationToken>${xmlEscape(page.at(-1)!)}</NextContinuationToken>` : ''}${contents}</ListBucketResult>`);
}

function listUploads(s3: Omit<TestS3, 'endpoint' | 'stop'>, q: URLSearchParams, res: ServerResponse): void {
  const prefix = q.get('prefix') ?? '';
  const ups = [...s3.uploads.entries()].filter(([, u]) => u.key.startsWith(prefix));
  sendXml(res, `<ListMultipartUploadsResult><Bucket>${s3.bucket}</Bucket><IsTruncated>false</IsTruncated>${ups.map(([id, u]) => `<Upload><Key>${xmlEscape(u.key)}</Key><UploadId>${id}</UploadId></Upload>`).join('')}</ListMultipartUploadsResult>`);
}
