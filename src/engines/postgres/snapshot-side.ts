import type pg from 'pg';
import type { SideTables, TablesTaken } from '../contract.js';
import { storeError, usageError } from '../../core/errors.js';
import { openPgSession } from './session.js';
import { snapshotTables, type PgSnapshotManifest } from './snapshot.js';
import { PgRestoreRefused, restoreTables, verifyArtifact } from './restore.js';
import { postgresTables } from './tables.js';

/**
 * A layout's tables on a PostgreSQL server of their own, beside its store (Layout.vectorTables): mem0's pgvector
 * tables beside its history file, PgVector's beside a Mastra store whose tables are on another server or in another
 * schema. Read at one instant by the engine's table artifact (snapshot.ts) on a connection of their own, checked and
 * restored by it (restore.ts) into the configured schema, replacing only the tables the artifact holds, each of which
 * `belongs` must accept (else the restore is refused before anything changes).
 */
export interface PgSideTables {
  /** Where to connect (`url`, `caFile`) and the schema the tables are in. */
  pg: { url: string; caFile?: string | undefined; schema: string };
  /** The config field messages name (`stores.NAME.mem0.pgvector`). */
  setting: string;
  /** How messages name the tables (`postgres schema public: memories, memories_entities`). */
  describe: string;
  /** The tables to take, as they are now (none: the snapshot is refused, naming `setting`). */
  find(client: pg.ClientBase): Promise<string[]>;
  /** Why a table of an artifact is not one of these tables (undefined: it is). */
  foreign(table: PgSnapshotManifest['tables'][number]): string | undefined;
}

export function pgSideTables(storeName: string, o: PgSideTables): SideTables {
  const { describe, setting } = o;
  const withClient = async <T>(doing: string, f: (client: pg.PoolClient) => Promise<T>): Promise<T> => {
    const session = openPgSession(storeName, o.pg, { setting, max: 1 });
    try {
      const client = await session.connect();
      let broken = false;
      try {
        return await f(client);
      } catch (err) {
        broken = !(err as { kind?: string }).kind;
        throw err instanceof PgRestoreRefused ? storeError(`${doing} ${describe}: ${err.message}`, err) : session.explain(err, doing);
      } finally {
        client.release(broken);
      }
    } finally {
      await session.end();
    }
  };
  const taken = (t: TablesTaken): TablesTaken => ({ ...t, source: describe });
  return {
    describe,
    take: (folder) => withClient('snapshot', async (client) => {
      const tables = await o.find(client);
      if (tables.length === 0) throw usageError(`${setting}: schema ${o.pg.schema} holds none of the tables to snapshot (${describe})`);
      await snapshotTables(client, { schema: o.pg.schema, tables, folder });
      return taken(await postgresTables.verify(folder));
    }),
    verify: async (folder) => taken(await postgresTables.verify(folder)),
    restore: (folder) => withClient('restore', async (client) => {
      const manifest = await verifyArtifact(folder);
      for (const t of manifest.tables) {
        const why = o.foreign(t);
        if (why) throw usageError(`${folder}: holds table ${JSON.stringify(t.name)}, ${why}: refused`);
      }
      const done = await restoreTables(client, { folder, schema: o.pg.schema });
      return { ...taken(await postgresTables.verify(folder)), tables: Object.fromEntries(done.tables.map((t) => [t.name, t.rows])) };
    }),
  };
}
