import { z } from '../../../vendor/zod.js';
import { pathField } from '../../../path-field.js';
import { timerDuration } from '../../../timer-duration.js';

/** A folder on an SSH host, over SFTP only (no shell is run there). */
export const sftpTargetSchema = z.strictObject({
  type: z.literal('sftp'),
  name: z.string().regex(/^[A-Za-z0-9_.-]+$/),
  host: z.string().min(1),
  port: z.number().int().min(1).max(65535).default(22),
  username: z.string().min(1),
  /** The host's key, as `ssh-keygen -lf` prints it (`SHA256:…`): no other host is ever sent a byte. */
  hostKeySha256: z.string().regex(/^SHA256:[A-Za-z0-9+/]{43}=?$/, 'SHA256:<43 base64 characters>, as ssh-keygen -lf prints it'),
  /** Snapshots go to `<path>/<store>/<snapshot>/` (absolute, or relative to the login folder). */
  path: pathField(),
  /** A private key file readable by this user only (mode 0600), or the key itself from the environment. */
  privateKeyFile: pathField().optional(),
  privateKey: z.string().min(1).optional(),
  passphrase: z.string().optional(),
  password: z.string().optional(),
  timeoutMs: timerDuration('ms').int().positive().default(30_000),
});
export type SftpTargetConfig = z.infer<typeof sftpTargetSchema>;
