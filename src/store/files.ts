import type { StoreConfig } from './config.js';
import { entityVectorDbOf, mem0Of } from '../layouts/mem0/names.js';
import { expandHome } from '../config/read.js';
import { sameFile } from './file-identity.js';
import { configError } from '../core/errors.js';
import { kindOf, notRegularFile } from './private-file.js';
import { statSync } from 'node:fs';

/**
 * The files on this machine that hold a store's data: its `db`, mem0's vector files when it keeps them in SQLite,
 * and Mastra's vector file when it is another file (`mastra.vectorDb`). A store in a database (`engine: postgres`)
 * has none on any host: its data is the server's.
 */
export function storeFiles(store: Pick<StoreConfig, 'layout' | 'db' | 'mem0' | 'mastra'> & { engine?: StoreConfig['engine'] }): string[] {
  if (store.engine === 'postgres') return [];
  const files = [store.db];
  const mem0 = store.layout === 'mem0' ? mem0Of(store) : undefined;
  if (mem0?.vectorStore === 'sqlite') files.push(mem0.vectorDb, entityVectorDbOf(mem0));
  const mastraVectors = store.layout === 'mastra' ? store.mastra?.vectorDb : undefined;
  if (mastraVectors && expandHome(mastraVectors) !== expandHome(store.db)) files.push(mastraVectors);
  return files.map((f) => expandHome(f));
}

/**
 * memory-warden's own records never go into a store: a `stateDb` that is one of a store's files (the same path, or
 * the same file through a link) would add its tables to the agent's data. Nor into what is not a file (a device, a
 * FIFO, a link: see notRegularFile). Refused, naming stateDb, before anything opens.
 */
export function assertStateApart(config: { stateDb: string; eraseKeyFile?: string | undefined; stores: Record<string, Pick<StoreConfig, 'layout' | 'db' | 'mem0' | 'mastra'>> }): void {
  const state = expandHome(config.stateDb);
  if (config.eraseKeyFile !== undefined) assertKeyApart(config.eraseKeyFile, state, config.stores);
  for (const [name, store] of Object.entries(config.stores)) {
    for (const file of storeFiles(store)) {
      if (sameFile(state, file)) {
        throw configError(`stateDb ${config.stateDb} is ${file === expandHome(store.db) ? 'the file' : 'a vector file'} of store ${name} (${file}): memory-warden keeps its records apart from every store; give stateDb another file`);
      }
    }
  }
  const kind = notRegularFile(state);
  if (kind) throw configError(`stateDb ${config.stateDb} is ${kind}: memory-warden keeps its records in a regular file it makes itself; give stateDb a file path`);
}

/**
 * The erase key is a file of its own: not the state db (whose hashes it keys: kept apart, they are backed up apart),
 * not a store's file, and, where something is there already, a regular file (a link to one is followed: a key on a
 * mounted secrets volume). Refused at load, naming eraseKeyFile.
 */
function assertKeyApart(keyFile: string, state: string, stores: Record<string, Pick<StoreConfig, 'layout' | 'db' | 'mem0' | 'mastra'>>): void {
  const key = expandHome(keyFile);
  const refuse = (what: string) => {
    throw configError(`eraseKeyFile ${keyFile} is ${what}: the erase key is a file of its own (64 hex digits), kept apart from the state db; give eraseKeyFile another path`);
  };
  if (sameFile(key, state)) refuse(`the state db (stateDb ${state})`);
  for (const [name, store] of Object.entries(stores)) for (const file of storeFiles(store)) if (sameFile(key, file)) refuse(`a file of store ${name} (${file})`);
  let st;
  try {
    st = statSync(key);
  } catch {
    return; // nothing there yet (made on first use, or refused then if the state db needs the key it lost)
  }
  if (!st.isFile()) refuse(kindOf(st));
}
