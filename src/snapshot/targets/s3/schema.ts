import { z } from '../../../vendor/zod.js';
import { timerDuration } from '../../../timer-duration.js';
import { pathField } from '../../../path-field.js';

/** S3 or any S3-compatible object storage (MinIO, R2, Backblaze B2, Ceph RGW, …). */
export const s3TargetSchema = z.strictObject({
  type: z.literal('s3'),
  name: z.string().regex(/^[A-Za-z0-9_.-]+$/),
  bucket: z.string().min(1),
  /** Key prefix inside the bucket; snapshots go to `<prefix><store>/<snapshot>/`. */
  prefix: z.string().regex(/^([^/].*\/)?$/, 'empty, or ending in / and not starting with /').default(''),
  region: z.string().min(1).default('us-east-1'),
  /** For S3-compatible storage: `https://<account>.r2.cloudflarestorage.com`, `http://minio:9000`, … */
  endpoint: z.string().url().optional(),
  /** Path-style URLs (`endpoint/bucket/key`): what MinIO and most S3-compatible servers want. */
  forcePathStyle: z.boolean().default(false),
  /** From the environment only (`${AWS_ACCESS_KEY_ID}`); left out, the SDK's own chain (env, profile, role) is used. */
  accessKeyId: z.string().min(1).optional(),
  secretAccessKey: z.string().min(1).optional(),
  sessionToken: z.string().min(1).optional(),
  /** Files larger than this go up as a multipart upload in parts of this size (S3's minimum is 5). */
  partSizeMb: z.number().int().min(5).max(5120).default(16),
  /** Parts in flight at once. */
  concurrency: z.number().int().min(1).max(16).default(4),
  /** Attempts per request (the SDK's own retry of 5xx, throttling and network errors) before the job fails. */
  maxAttempts: z.number().int().min(1).max(10).default(3),
  /** No answer in this long: the request fails as transient. */
  timeoutMs: timerDuration('ms').int().positive().default(120_000),
  /**
   * How an upload is confirmed. `auto`: the sha256 the storage reports, else its md5 ETag, else reading the object
   * back; `read-back`: every object is also read back whole (downloads each one once more).
   */
  verifyUploads: z.enum(['auto', 'read-back']).default('auto'),
  /**
   * Where this machine records the multipart uploads it starts, until each is complete or aborted: how a killed
   * upload is aborted by id on the next run. Also holds the spool file of storages without multipart uploads.
   */
  uploadJournalDir: pathField().default('~/.local/state/memory-warden/s3-uploads'),
});
export type S3TargetConfig = z.infer<typeof s3TargetSchema>;
