import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * s3rver 3.7.1 (an S3-compatible fake nobody here wrote) on a loopback port, files in a temp folder: what the S3
 * target must cope with from a store that implements less than S3 does. Stopped and removed by `stop()`.
 *
 * What it does not do, by reading its source (lib/routes.js, lib/controllers/object.js): ListMultipartUploads
 * answers 501, AbortMultipartUpload answers 405, no `x-amz-checksum-*` is checked or echoed, Content-MD5 is
 * ignored, and a completed multipart upload's ETag is the md5 of the whole object. Its only key pair is
 * S3RVER/S3RVER; it checks SigV4 signatures.
 */
export interface TestS3rver {
  endpoint: string;
  bucket: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** The folder its objects are kept in. */
  dir: string;
  stop(): Promise<void>;
}

interface S3rverServer {
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
}
type S3rverClass = new (options: Record<string, unknown>) => S3rverServer;

export async function startS3rver(opts: { bucket?: string } = {}): Promise<TestS3rver> {
  const S3rver = createRequire(import.meta.url)('s3rver') as S3rverClass;
  const bucket = opts.bucket ?? 'mw-s3rver';
  const dir = mkdtempSync(join(tmpdir(), 'mw-s3rver-'));
  const server = new S3rver({
    address: '127.0.0.1', port: 0, silent: true, directory: dir, vhostBuckets: false, configureBuckets: [{ name: bucket }],
  });
  const { port } = await server.run();
  return {
    endpoint: `http://127.0.0.1:${port}`, bucket, accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', dir,
    stop: async () => {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
