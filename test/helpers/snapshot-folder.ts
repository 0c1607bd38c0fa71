/** A snapshot folder with a valid manifest of any files, for tests that need snapshots holding given bytes. */
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { MANIFEST_FORMAT, type Manifest } from '../../src/snapshot/manifest.js';

/**
 * A snapshot folder as memory-warden publishes it, without running a snapshot: the given files copied in and a
 * manifest of `store` listing each with its size and sha256 (the first file is the SQLite part). For tests that
 * need snapshots holding particular bytes; `manifest` overrides any field (a forged or another store's manifest).
 */
export function writeSnapshotFolder(
  root: string, store: string, name: string, files: Record<string, string>, manifest: Partial<Manifest> = {},
): string {
  const dir = join(root, store, name);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const entries: Manifest['files'] = {};
  for (const [rel, from] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, rel)), { recursive: true });
    copyFileSync(from, join(dir, rel));
    entries[rel] = { bytes: statSync(join(dir, rel)).size, sha256: createHash('sha256').update(readFileSync(join(dir, rel))).digest('hex') };
  }
  const at = `${name.slice(0, 4)}-${name.slice(5, 7)}-${name.slice(8, 10)}T${name.slice(11, 13)}:${name.slice(13, 15)}:${name.slice(15, 17)}.000Z`;
  const first = Object.keys(files)[0]!;
  const full: Manifest = {
    format: MANIFEST_FORMAT, tool: { name: 'memory-warden', version: 'test' }, store, name, layout: 'warden',
    reason: name.endsWith('-pre-restore') ? 'pre-restore' : 'scheduled', startedAt: at, finishedAt: at, skewMs: 0,
    sqlite: { file: first, source: from(files, first), startedAt: at, finishedAt: at, integrity: 'ok', journalMode: 'delete', tables: {}, rows: null },
    qdrant: [], files: entries, ...manifest,
  };
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(full, null, 2) + '\n', { mode: 0o600 });
  return dir;
}

const from = (files: Record<string, string>, rel: string) => files[rel]!;
