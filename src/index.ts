/**
 * memory-warden as a library: what a verifier plugin imports.
 *
 * ```ts
 * import { defineVerifier } from 'memory-warden';
 * export default defineVerifier({ name: 'lockfile', async verify(task, ctx) { ... } });
 * ```
 */
export { defineVerifier } from './verifiers/define.js';
export { Refusal, refuse } from './verifiers/types.js';
export type {
  Allowlists,
  MemoryUnderReview,
  NoReading,
  Observation,
  ParamsSchema,
  Verdict,
  Verifier,
  VerifierContext,
  VerifierResult,
  VerifyTask,
} from './verifiers/types.js';
export { runVerifier } from './drift/dispatch.js';
