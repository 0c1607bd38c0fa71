import { z } from '../../../vendor/zod.js';
import { pathField } from '../../../config/path-field.js';
import { secretField } from '../../../config/secret-fields.js';
import { timerDuration } from '../../../time/timer-duration.js';

/** A folder on an SSH host, over SFTP only (no shell is run there). */
export const sftpTargetSchema = z.strictObject({
  type: z.literal('sftp').describe('A folder on another machine, over SFTP (OpenSSH).'),
  name: z.string().regex(/^[A-Za-z0-9_.-]+$/)
    .describe('The target\'s name: `--target NAME` on snapshots list|verify|push and restore.'),
  host: z.string().min(1).describe('The SFTP server.'),
  port: z.number().int().min(1).max(65535).default(22).describe('Its SSH port.'),
  username: z.string().min(1).describe('The account to log in as.'),
  hostKeySha256: z.string().regex(/^SHA256:[A-Za-z0-9+/]{43}=?$/, 'SHA256:<43 base64 characters>, as ssh-keygen -lf prints it')
    .describe('The host\'s key, as `ssh-keygen -lf` prints it (`SHA256:…`): no other host is ever sent a byte.'),
  path: pathField()
    .describe('Snapshots go to `<path>/<store>/<snapshot>/` (absolute, or relative to the login folder).'),
  privateKeyFile: pathField().optional()
    .describe('A private key file readable by this user only (mode 0600), or the key itself from the environment.'),
  privateKey: secretField().min(1).optional().describe('The private key itself, from the environment only: `${SFTP_KEY}`.'),
  passphrase: secretField().optional().describe('The private key\'s passphrase, from the environment only: `${SFTP_PASSPHRASE}`.'),
  password: secretField().optional().describe('From the environment only: `${SFTP_PASSWORD}`.'),
  verifyUploads: z.enum(['auto', 'read-back']).default('auto')
    .describe('How an upload is confirmed. `auto`: the SSH channel\'s integrity, every write acknowledged, the file fsynced and its size checked; `read-back`: every file is also read back whole and hashed (sends each one back over the link).'),
  timeoutMs: timerDuration('ms').int().positive().default(30_000)
    .describe('Connect and per-request timeout; past it the job fails transiently (retried).'),
});
export type SftpTargetConfig = z.infer<typeof sftpTargetSchema>;
