import { z } from 'zod';

export const verifySchema = z.strictObject({
  /** Verifier plugin modules to load at start (paths relative to the config file). */
  plugins: z.array(z.string().min(1)).default([]),
  rules: z.array(z.record(z.string(), z.unknown())).default([]),
});

export type VerifyConfig = z.infer<typeof verifySchema>;
