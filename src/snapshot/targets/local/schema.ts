import { z } from '../../../vendor/zod.js';
import { pathField } from '../../../path-field.js';

/** A folder on this machine: another disk, a NAS mount. Today's kind of copy, behind the same contract. */
export const localTargetSchema = z.strictObject({
  type: z.literal('local'),
  name: z.string().regex(/^[A-Za-z0-9_.-]+$/),
  /** Snapshots go to `<path>/<store>/<snapshot>/`. */
  path: pathField(),
});
export type LocalTargetConfig = z.infer<typeof localTargetSchema>;
