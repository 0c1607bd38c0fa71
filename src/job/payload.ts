import { createRequire } from 'node:module';
import type { PayloadSchema } from './job.js';

const require = createRequire(import.meta.url);

/** The strict zod schema of `{ store }`, built when a payload needs its words (zod's CommonJS build: sync). */
export function storePayloadZod() {
  const { z } = require('zod') as typeof import('zod');
  return z.strictObject({ store: z.string().min(1) });
}

let zodSchema: ReturnType<typeof storePayloadZod> | undefined;

/**
 * `{ store: NAME }`, the payload of a job of one store: exactly what storePayloadZod() accepts, checked without zod
 * when it is plainly that (what `check` hands the integrity job, so its start-up loads no zod); any other value
 * goes to the zod schema, for zod's own result and message. test/cli-startup.test.ts compares the two.
 */
export const storePayload: PayloadSchema<{ store: string }> = {
  safeParse(payload: unknown) {
    if (typeof payload === 'object' && payload !== null && Object.getPrototypeOf(payload) === Object.prototype) {
      const keys = Reflect.ownKeys(payload);
      const store = (payload as { store?: unknown }).store;
      if (keys.length === 1 && keys[0] === 'store' && typeof store === 'string' && store !== '') return { success: true, data: { store } };
    }
    zodSchema ??= storePayloadZod();
    return zodSchema.safeParse(payload);
  },
};
