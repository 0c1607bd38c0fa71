import { z } from '../../vendor/zod.js';
import { pathField } from '../../config/path-field.js';
import { localTargetSchema } from './local/schema.js';
import { s3TargetSchema } from './s3/schema.js';
import { sftpTargetSchema } from './sftp/schema.js';

/** Fields every target has, whatever its type. */
const common = {
  keep: z.number().int().positive().default(7)
    .describe('Complete scheduled snapshots kept on this target (pre-restore ones are never deleted here).'),
  stores: z.array(z.string().min(1)).optional().describe('Only these stores go to this target (default: every store).'),
  encrypt: z
    .strictObject({
      recipients: z.array(z.string().regex(/^age1[0-9a-z]+$/, 'an age recipient (age1…)')).min(1)
        .describe('age public keys (`age-keygen -y`) every file is encrypted to before it leaves the machine; several let several people restore.'),
      identityFile: pathField().optional()
        .describe('The age identity (`AGE-SECRET-KEY-1…`, mode 0600), needed only where restores run; else `MEMORY_WARDEN_AGE_IDENTITY`.'),
    })
    .optional()
    .describe('Client-side age encryption: every file is encrypted to these recipients (`age1…`) before it leaves the machine. The identity that decrypts is needed only where restores run: `MEMORY_WARDEN_AGE_IDENTITY`, or `identityFile` (mode 0600).'),
  authKeyFile: pathField().optional()
    .describe('The operator\'s key (`memory-warden snapshots keygen FILE`, mode 0600; keep it with the age identity, never on the target): every manifest uploaded carries its MAC, and list, verify, restore and erase refuse a snapshot whose MAC is missing or wrong. Without it, whoever can write the target can forge a snapshot that verifies.'),
};

export const targetSchema = z.discriminatedUnion('type', [
  localTargetSchema.extend(common),
  s3TargetSchema.extend(common),
  sftpTargetSchema.extend(common),
]);
export type TargetConfig = z.infer<typeof targetSchema>;

export const targetsSchema = z
  .array(targetSchema)
  .default([])
  .superRefine((targets, ctx) => {
    const seen = new Set<string>();
    for (const [i, t] of targets.entries()) {
      if (seen.has(t.name)) ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `target name "${t.name}" used twice` });
      seen.add(t.name);
    }
  });

/** Relative file paths in targets (a local folder, key and identity files) resolve against the config file. */
export function resolveTargetPaths(targets: unknown, abs: (p: unknown) => unknown): unknown {
  if (!Array.isArray(targets)) return targets;
  return targets.map((t: unknown) => {
    if (!t || typeof t !== 'object') return t;
    const o = { ...(t as Record<string, unknown>) };
    if (o.type === 'local') o.path = abs(o.path);
    if (o.privateKeyFile !== undefined) o.privateKeyFile = abs(o.privateKeyFile);
    if (o.authKeyFile !== undefined) o.authKeyFile = abs(o.authKeyFile);
    if (o.uploadJournalDir !== undefined) o.uploadJournalDir = abs(o.uploadJournalDir);
    const enc = o.encrypt as Record<string, unknown> | undefined;
    if (enc && typeof enc === 'object' && enc.identityFile !== undefined) o.encrypt = { ...enc, identityFile: abs(enc.identityFile) };
    return o;
  });
}
