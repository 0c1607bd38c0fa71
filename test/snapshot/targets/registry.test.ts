import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { TARGET_TYPES } from '../../../src/snapshot/targets/registry.js';
import { PLACES } from './fixtures.js';
import { loadConfig } from '../../../src/config/config.js';

const dir = join(import.meta.dirname, '../../../src/snapshot/targets');

describe('snapshot target registry', () => {
  it('names every implementation folder, and the contract suite runs each', () => {
    const folders = readdirSync(dir).filter((n) => statSync(join(dir, n)).isDirectory()).sort();
    expect(Object.keys(TARGET_TYPES).sort()).toEqual(folders);
    expect(PLACES.map(([t]) => t).filter((t) => folders.includes(t)).sort()).toEqual(folders);
  });
});

describe('snapshot target config', () => {
  const load = (targets: unknown[], env: NodeJS.ProcessEnv = {}) => loadConfig({ overrides: { snapshot: { targets } }, env });
  const s3 = { type: 's3', name: 'off', bucket: 'b' };

  it('takes credentials from the environment only', () => {
    const cfg = load([{ ...s3, accessKeyId: '${KEY_ID}', secretAccessKey: '${SECRET}' }], { KEY_ID: 'AKIA1', SECRET: 's3cr3t' });
    expect(cfg.snapshot.targets[0]).toMatchObject({ accessKeyId: 'AKIA1', secretAccessKey: 's3cr3t', keep: 7, prefix: '' });
    for (const field of ['secretAccessKey', 'accessKeyId', 'sessionToken']) {
      expect(() => load([{ ...s3, [field]: 'literal-secret' }]), field).toThrow(new RegExp(`snapshot.targets.0.${field}: a credential goes in the environment`));
    }
    expect(() => load([{ ...s3, secretAccessKey: 'pre${SECRET}' }], { SECRET: 'x' })).toThrow(/credential goes in the environment/);
    const sftp = { type: 'sftp', name: 'box', host: 'h', username: 'u', path: 'p', hostKeySha256: `SHA256:${'A'.repeat(43)}` };
    for (const field of ['password', 'passphrase', 'privateKey']) expect(() => load([{ ...sftp, [field]: 'hunter2' }]), field).toThrow(/credential goes in the environment/);
    expect(() => load([{ ...s3, secretAccessKey: '${UNSET_SECRET}' }])).toThrow(/UNSET_SECRET is not set/);
  });

  it('names the failing field', () => {
    expect(() => load([{ type: 'ftp', name: 'x' }])).toThrow(/snapshot.targets.0.type/);
    expect(() => load([{ ...s3, partSizeMb: 1 }])).toThrow(/snapshot.targets.0.partSizeMb/);
    expect(() => load([s3, { ...s3 }])).toThrow(/target name "off" used twice/);
    expect(() => load([{ ...s3, encrypt: { recipients: ['AGE-SECRET-KEY-1XYZ'] } }])).toThrow(/snapshot.targets.0.encrypt.recipients.0: an age recipient/);
    expect(() => load([{ type: 'sftp', name: 'box', host: 'h', username: 'u', path: 'p' }])).toThrow(/snapshot.targets.0.hostKeySha256/);
  });
});
