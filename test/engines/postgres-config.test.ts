import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cliAsync } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { freePort } from '../helpers/redis.js';
import { assertBuilt, tempDir } from '../queue/fixtures.js';
import { pgStoreConfig, URL_VAR } from './pg-fixture.js';

/**
 * A PostgreSQL store's settings: the URL from the environment only and never printed; what is wrong with the server,
 * the database, the schema or the TLS settings is one line naming the setting, exit 2.
 */
describe('a PostgreSQL store\'s config', { timeout: 120_000 }, () => {
  let db: TestDatabase;
  beforeAll(async () => {
    assertBuilt();
    db = await createTestDatabase('pg_config');
  });
  afterAll(async () => {
    await db?.drop();
  });

  /** The one `memory-warden:` line of a run that must fail with exit 2, and that the URL's password is nowhere. */
  async function refused(args: string[], env: Record<string, string>, secret = 's3cret-pw'): Promise<string> {
    const r = await cliAsync(args, env);
    expect(r.code, r.stderr).toBe(2);
    const lines = r.stderr.split('\n').filter((l) => l.startsWith('memory-warden:'));
    expect(lines, r.stderr).toHaveLength(1);
    expect(r.stderr + r.stdout).not.toContain(secret);
    return lines[0]!;
  }

  const withPassword = (url: string) => url.replace('postgres://postgres@', 'postgres://postgres:s3cret-pw@');

  it('a URL written in the file is refused, naming the field; `config` blanks the URL from the environment', async () => {
    const dir = tempDir('pg-config');
    const literal = join(dir, 'literal.yaml');
    writeFileSync(literal, JSON.stringify({ stateDb: join(dir, 'state.db'), stores: { fleet: { engine: 'postgres', postgres: { url: withPassword(db.url), schema: 'fleet' } } } }));
    expect(await refused(['check', '--config', literal], {})).toContain('stores.fleet.postgres.url: a credential goes in the environment');
    const store = pgStoreConfig(db);
    const r = await cliAsync(['config', '--config', store.config], { [URL_VAR]: withPassword(db.url) });
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().stores.fleet.postgres).toMatchObject({ url: '[redacted]', schema: 'fleet' });
    expect(r.stdout).not.toContain('s3cret-pw');
    expect(r.stdout).not.toContain(db.name);
  });

  it('`config` names each store as its engine does: a PostgreSQL store by its schema, with no empty db; a SQLite store by its file', async () => {
    const dir = tempDir('pg-config-where');
    const file = join(dir, 'c.yaml');
    const sqlite = join(dir, 'agent.db');
    writeFileSync(file, JSON.stringify({
      stateDb: join(dir, 'state.db'),
      stores: { fleet: { engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema: 'fleet' } }, agent: { db: sqlite } },
    }));
    const r = await cliAsync(['config', '--config', file], { [URL_VAR]: withPassword(db.url) });
    expect(r.code, r.stderr).toBe(0);
    const stores = r.json().stores as Record<string, Record<string, unknown>>;
    expect(stores.fleet).not.toHaveProperty('db');
    expect(stores.fleet).toMatchObject({ engine: 'postgres', where: 'postgres schema fleet', postgres: { url: '[redacted]', schema: 'fleet' } });
    expect(stores.agent).toMatchObject({ engine: 'sqlite', db: sqlite, where: sqlite });
    expect(r.stdout).not.toContain('s3cret-pw');
    expect(r.stdout).not.toContain('"db": ""');
  });

  it('the engine decides what a store needs: db for SQLite, a postgres section (and no db, no host) for PostgreSQL', async () => {
    const dir = tempDir('pg-config');
    const file = join(dir, 'c.yaml');
    const write = (store: Record<string, unknown>) => writeFileSync(file, JSON.stringify({ stateDb: join(dir, 'state.db'), stores: { fleet: store } }));
    write({ engine: 'postgres' });
    expect(await refused(['check', '--config', file], {})).toContain('stores.fleet.postgres');
    write({ engine: 'postgres', db: join(dir, 'm.db'), postgres: { url: `\${${URL_VAR}}`, schema: 'fleet' } });
    expect(await refused(['check', '--config', file], { [URL_VAR]: db.url })).toContain('stores.fleet.db');
    write({ engine: 'postgres', layout: 'mem0', postgres: { url: `\${${URL_VAR}}`, schema: 'fleet' } });
    expect(await refused(['check', '--config', file], { [URL_VAR]: db.url })).toContain('stores.fleet.layout');
    write({ layout: 'warden' });
    expect(await refused(['check', '--config', file], {})).toContain('stores.fleet.db');
    write({ engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema: 'Fleet; DROP' } });
    expect(await refused(['check', '--config', file], { [URL_VAR]: db.url })).toContain('stores.fleet.postgres.schema');
  });

  it('an unreachable server, a missing database, schema or table, an unreadable CA or a server without TLS: one line naming the setting', async () => {
    const store = pgStoreConfig(db);
    const port = await freePort();
    const unreachable = await refused(['check', '--config', store.config], { [URL_VAR]: `postgres://postgres:s3cret-pw@127.0.0.1:${port}/x` });
    expect(unreachable).toContain('stores.fleet.postgres.url: cannot reach the server (ECONNREFUSED)');
    const nodb = await refused(['check', '--config', store.config], { [URL_VAR]: withPassword(db.url.replace(db.name, `${db.name}_gone`)) });
    expect(nodb).toMatch(/stores\.fleet\.postgres\.url: database ".*_gone" does not exist/);
    const noschema = await refused(['run', 'prune', '--config', store.config], { [URL_VAR]: withPassword(db.url) });
    expect(noschema).toContain('stores.fleet.postgres.schema: no schema "fleet" in the database (memory-warden init --config FILE --store fleet creates it)');
    await db.client.query('CREATE SCHEMA fleet');
    const notable = await refused(['check', '--config', store.config], { [URL_VAR]: withPassword(db.url) });
    expect(notable).toContain('stores.fleet.postgres.schema: schema "fleet" has no table memory');
    const missingCa = pgStoreConfig(db, { postgres: { caFile: '/nonexistent/ca.pem' } });
    expect(await refused(['check', '--config', missingCa.config], missingCa.env)).toContain('stores.fleet.postgres.caFile: cannot read /nonexistent/ca.pem (ENOENT)');
    const dir = tempDir('pg-ca');
    writeFileSync(join(dir, 'ca.pem'), '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
    const tls = pgStoreConfig(db, { postgres: { caFile: join(dir, 'ca.pem') } });
    expect(await refused(['check', '--config', tls.config], tls.env)).toContain('stores.fleet.postgres.caFile: TLS:');
  });
});
