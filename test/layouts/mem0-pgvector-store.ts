import pg from 'pg';
import { tempDir } from '../helpers/store.js';
import { startPgvectorServer, type PgvectorServer } from '../helpers/pg.js';
import { PG_URL_VAR, sdkStore, type SdkStore } from './mem0-sdk.js';

/** One PGlite server with pgvector, the test's connection to it, and mem0's pgvector store on it (history in a temp dir). */
export interface PgvectorSdkStore {
  dir: string;
  server: PgvectorServer;
  client: pg.Client;
  s: SdkStore;
  stop(): Promise<void>;
}

export async function pgvectorSdkStore(prefix: string): Promise<PgvectorSdkStore> {
  const tmp = tempDir(prefix);
  const server = await startPgvectorServer();
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  process.env[PG_URL_VAR] = server.url;
  const s = await sdkStore('pgvector', tmp.dir, undefined, server.url);
  return {
    dir: tmp.dir, server, client, s,
    async stop() {
      await client.end().catch(() => {});
      await server.stop();
      delete process.env[PG_URL_VAR];
      tmp.cleanup();
    },
  };
}
