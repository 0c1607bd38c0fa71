import { z } from '../../../vendor/zod.js';
import { timerDuration } from '../../../time/timer-duration.js';
import { pathField } from '../../../config/path-field.js';
import { secretField } from '../../../config/secret-fields.js';

/** S3 or any S3-compatible object storage (MinIO, R2, Backblaze B2, Ceph RGW, …). */
export const s3TargetSchema = z.strictObject({
  type: z.literal('s3').describe('AWS S3 or an S3-compatible store.'),
  name: z.string().regex(/^[A-Za-z0-9_.-]+$/)
    .describe('The target\'s name: `--target NAME` on snapshots list|verify|push and restore.'),
  bucket: z.string().min(1).describe('The bucket the snapshots go to.'),
  prefix: z.string().regex(/^([^/].*\/)?$/, 'empty, or ending in / and not starting with /').default('')
    .describe('Key prefix inside the bucket; snapshots go to `<prefix><store>/<snapshot>/`.'),
  region: z.string().min(1).default('us-east-1').describe('The bucket\'s region.'),
  endpoint: z.string().url().optional()
    .describe('For S3-compatible storage: `https://<account>.r2.cloudflarestorage.com`, `http://minio:9000`, …'),
  forcePathStyle: z.boolean().default(false)
    .describe('Path-style URLs (`endpoint/bucket/key`): what MinIO and most S3-compatible servers want.'),
  accessKeyId: secretField().min(1).optional()
    .describe('From the environment only (`${AWS_ACCESS_KEY_ID}`); left out, the SDK\'s own chain (env, profile, role) is used.'),
  secretAccessKey: secretField().min(1).optional().describe('From the environment only: `${AWS_SECRET_ACCESS_KEY}`.'),
  sessionToken: secretField().min(1).optional().describe('From the environment only: `${AWS_SESSION_TOKEN}`.'),
  partSizeMb: z.number().int().min(5).max(5120).default(16)
    .describe('Files larger than this go up as a multipart upload in parts of this size (S3\'s minimum is 5).'),
  concurrency: z.number().int().min(1).max(16).default(4).describe('Parts in flight at once.'),
  maxAttempts: z.number().int().min(1).max(10).default(3)
    .describe('Attempts per request (the SDK\'s own retry of 5xx, throttling and network errors) before the job fails.'),
  timeoutMs: timerDuration('ms').int().positive().default(120_000)
    .describe('No answer in this long: the request fails as transient.'),
  verifyUploads: z.enum(['auto', 'read-back']).default('auto')
    .describe('How an upload is confirmed. `auto`: the sha256 the storage reports, else its md5 ETag, else reading the object back; `read-back`: every object is also read back whole (downloads each one once more).'),
  uploadJournalDir: pathField().default('~/.local/state/memory-warden/s3-uploads')
    .describe('Where this machine records the multipart uploads it starts, until each is complete or aborted: how a killed upload is aborted by id on the next run. Also holds the spool file of storages without multipart uploads.'),
});
export type S3TargetConfig = z.infer<typeof s3TargetSchema>;
