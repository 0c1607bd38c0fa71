/**
 * s3rver 3.7.1 (the npm S3 fake) on a loopback port, files in a temp folder: a store that implements less than S3.
 * Read in its source: ListMultipartUploads 501, AbortMultipartUpload 405, no checksums kept, Content-MD5 ignored.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

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
