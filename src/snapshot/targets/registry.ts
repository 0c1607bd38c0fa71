import type { TargetConfig } from './config.js';
import type { SnapshotTarget } from './types.js';

/**
 * The snapshot target types, by `type`. Explicit on purpose: test/snapshot/targets/registry.test.ts fails when a
 * folder under src/snapshot/targets is missing here. Implementations load on first use, so a CLI command that
 * uses no target never loads the S3 SDK or ssh2.
 */
export const TARGET_TYPES: { readonly [T in TargetConfig['type']]: (config: Extract<TargetConfig, { type: T }>, store: string) => Promise<SnapshotTarget> } = {
  local: async (c, store) => (await import('./local/index.js')).createLocalTarget(c, store),
  s3: async (c, store) => (await import('./s3/index.js')).createS3Target(c, store),
  sftp: async (c, store) => (await import('./sftp/index.js')).createSftpTarget(c, store),
};

/** Connect to one configured target for one store. */
export function openTarget(config: TargetConfig, store: string): Promise<SnapshotTarget> {
  const create = TARGET_TYPES[config.type] as (c: TargetConfig, s: string) => Promise<SnapshotTarget>;
  return create(config, store);
}
