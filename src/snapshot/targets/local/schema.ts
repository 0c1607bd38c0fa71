import { z } from '../../../vendor/zod.js';
import { pathField } from '../../../config/path-field.js';

/** A folder on this machine: another disk, a NAS mount. Today's kind of copy, behind the same contract. */
export const localTargetSchema = z.strictObject({
  type: z.literal('local').describe('A folder on this machine (a mounted NAS or disk).'),
  name: z.string().regex(/^[A-Za-z0-9_.-]+$/)
    .describe('The target\'s name: `--target NAME` on snapshots list|verify|push and restore.'),
  path: pathField().describe('Snapshots go to `<path>/<store>/<snapshot>/`.'),
});
export type LocalTargetConfig = z.infer<typeof localTargetSchema>;
