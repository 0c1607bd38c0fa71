import type { TargetConfig } from './config.js';
import { atMost } from './digest.js';
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

/**
 * Connect to one configured target for one store. Its reads are held to the contract's bound here too, whatever
 * the implementation does: a stream past `maxBytes` fails (each implementation also stops asking the storage for
 * more: local and sftp read no further, S3 asks for a byte range).
 */
export async function openTarget(config: TargetConfig, store: string): Promise<SnapshotTarget> {
  const create = TARGET_TYPES[config.type] as (c: TargetConfig, s: string) => Promise<SnapshotTarget>;
  const target = await create(config, store);
  const get = target.get.bind(target);
  target.get = async (snapshot, key, signal, maxBytes) => atMost(await get(snapshot, key, signal, maxBytes), maxBytes, `target ${target.name}: ${snapshot}/${key}`);
  return target;
}
