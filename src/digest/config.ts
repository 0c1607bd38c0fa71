import { z } from 'zod';

export const smtpSchema = z.strictObject({
  host: z.string().min(1),
  port: z.number().int().min(1).max(65535).default(587),
  /** true: TLS from the start (port 465); false: STARTTLS when the server offers it. */
  secure: z.boolean().default(false),
  user: z.string().optional(),
  /** From the environment only: `password: ${SMTP_PASSWORD}`. */
  password: z.string().optional(),
  timeoutMs: z.number().int().positive().default(30_000),
});

export const digestSchema = z.strictObject({
  from: z.string().default('memory-warden <memory-warden@localhost>'),
  to: z.array(z.string().min(1)).default([]),
  /** One email covering every store, or one per store. */
  perStore: z.boolean().default(false),
  /** Send a short "all quiet" email when nothing is new anywhere. */
  allQuiet: z.boolean().default(true),
  /** New rows listed in full per store; the rest are counted. */
  maxRows: z.number().int().positive().default(200),
});

export type SmtpConfig = z.infer<typeof smtpSchema>;
export type DigestConfig = z.infer<typeof digestSchema>;
