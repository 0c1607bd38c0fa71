/**
 * One S3 request's failure in one line, transient or not, and how to tell "the storage does not implement this"
 * (501, 405) from a failure; optional checksum headers, dropped once a storage refuses them.
 */
import type { PutObjectCommand, S3Client, UploadPartCommand } from '@aws-sdk/client-s3';
import { storeError, transientError, WardenError } from '../../../core/errors.js';

/** What every request of one S3 target needs: its client, bucket and name, and what the storage has shown it lacks. */
export interface S3Context {
  /** The target's name, for messages. */
  target: string;
  client: S3Client;
  bucket: string;
  /** One request, its failure in one line (s3Request). */
  request<T>(doing: string, Key: string, call: () => Promise<T>): Promise<T>;
  /** Whether the storage has shown it refuses `x-amz-checksum-*` headers (then they are not sent). */
  lacks: { checksums: boolean };
}

interface SdkError {
  name?: string;
  message?: string;
  $metadata?: { httpStatusCode?: number };
  $retryable?: unknown;
}

/** The HTTP status behind an SDK error, or behind the WardenError that wraps one. */
export function httpStatus(err: unknown): number | undefined {
  const e = (err instanceof WardenError ? err.cause : err) as SdkError | undefined;
  return e?.$metadata?.httpStatusCode;
}

function sdkName(err: unknown): string | undefined {
  return ((err instanceof WardenError ? err.cause : err) as SdkError | undefined)?.name;
}

/**
 * The storage does not implement the call (s3rver: 501 for ListMultipartUploads, 405 for AbortMultipartUpload):
 * a fact about the storage, not a failure of this request.
 */
export function unsupported(err: unknown): boolean {
  const status = httpStatus(err);
  return status === 501 || status === 405 || sdkName(err) === 'NotImplemented' || sdkName(err) === 'MethodNotAllowed';
}

/** The object or upload named is not there (404, NoSuchKey, NoSuchUpload). */
export function notThere(err: unknown): boolean {
  return httpStatus(err) === 404 || sdkName(err) === 'NoSuchKey' || sdkName(err) === 'NoSuchUpload';
}

/** Run one request; its failure says what was being done where: 5xx, throttling, timeouts and network errors are transient. */
export async function s3Request<T>(what: { target: string; bucket: string }, doing: string, Key: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof WardenError) throw err;
    const e = err as SdkError;
    const status = e.$metadata?.httpStatusCode;
    const message = `target ${what.target}: ${doing} s3://${what.bucket}/${Key}: ${status ? `HTTP ${status} ` : ''}${e.name ?? ''} ${e.message ?? String(err)}`.trim();
    const transient = status === undefined || status >= 500 || status === 429 || e.$retryable !== undefined || e.name === 'TimeoutError' || e.name === 'AbortError';
    if (status === 404 || e.name === 'NoSuchKey' || status === 501) throw storeError(message, err);
    throw transient ? transientError(message, err) : storeError(message, err);
  }
}

/**
 * A request sent with `x-amz-checksum-*` headers, and again without them if the storage does not implement them;
 * learnt once, in `lacks`, for the target's life.
 */
export async function withOptionalChecksum<T>(lacks: { checksums: boolean }, send: (checksums: boolean) => Promise<T>): Promise<T> {
  if (lacks.checksums) return send(false);
  try {
    return await send(true);
  } catch (err) {
    if (!unsupported(err)) throw err;
    lacks.checksums = true;
    return send(false);
  }
}

/**
 * The request signed with this sha256 of its body (hex, `x-amz-content-sha256`), hashed by the caller already:
 * the SDK does not hash the body a second time, and a body it would not hash (a stream) is signed all the same.
 * The storage checks it against the bytes it receives (S3: XAmzContentSHA256Mismatch).
 */
export function signedPayload<C extends PutObjectCommand | UploadPartCommand>(command: C, sha256Hex: string): C {
  type Args = { request: unknown };
  const stack = command.middlewareStack as unknown as {
    add(mw: (next: (args: Args) => Promise<unknown>) => (args: Args) => Promise<unknown>, opts: { step: 'build'; name: string }): void;
  };
  stack.add((next) => (args) => {
    const req = args.request as { headers?: Record<string, string> };
    if (req.headers) req.headers['x-amz-content-sha256'] = sha256Hex;
    return next(args);
  }, { step: 'build', name: 'memoryWardenPayloadSha256' });
  return command;
}
