/**
 * The snapshot root holds nothing but snapshots: a root that is, or contains, the folder of a store's file is
 * refused at config load, so no listing of `<root>/<store>/` can meet a live store.
 */
import { realpathSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { expandHome } from '../config/read.js';
import { configError } from '../core/errors.js';
import { storeFiles } from '../store/files.js';
import type { StoreConfig } from '../store/config.js';

type Stores = Record<string, Pick<StoreConfig, 'layout' | 'db' | 'mem0' | 'mastra'>>;

/** Refused, naming snapshot.root and the store, before anything opens; `source` is the config file's words. */
export function assertSnapshotRootApart(config: { snapshot: { root: string }; stores: Stores }, source = 'config'): void {
  const root = canonical(expandHome(config.snapshot.root));
  for (const [name, store] of Object.entries(config.stores)) {
    for (const file of storeFiles(store)) {
      const folder = dirname(canonical(file));
      const rel = relative(root, folder);
      if (rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel))) {
        throw configError(
          `${source}: snapshot.root ${config.snapshot.root} ${rel === '' ? 'is' : 'contains'} the folder of store ${name}'s file ${file}: ` +
            'snapshot.root must hold only snapshots (give it a folder of its own, outside every store\'s folder)',
        );
      }
    }
  }
}

/** The absolute path with every link in its existing part resolved: a link cannot hide that two folders are one. */
function canonical(path: string): string {
  const abs = resolve(path);
  let head = abs;
  const tail: string[] = [];
  for (;;) {
    try {
      return join(realpathSync(head), ...tail);
    } catch {
      const up = dirname(head);
      if (up === head) return abs;
      tail.unshift(basename(head));
      head = up;
    }
  }
}
