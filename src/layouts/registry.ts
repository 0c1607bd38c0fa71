import type { StoreConfig } from '../store/config.js';
import type { AnyStoreHandle, Layout, LayoutJobs, PostgresLayout, StoreHandle } from './contract.js';
import { usageError } from '../core/errors.js';
import { wardenLayout } from './warden/index.js';
import { mem0Layout } from './mem0/index.js';
import { mastraLayout } from './mastra/index.js';

export type { Layout } from './contract.js';

/**
 * Every store layout, by the name `layout:` takes in the config. `warden` is the memory table of the brief;
 * `mem0` is a mem0 deployment (history.db + Qdrant or its SQLite vectors, docs/mem0-layout.md). Features ask
 * the layout; they never branch on its name. A test fails when a folder under src/layouts/ is missing here, and
 * every entry runs test/layouts/contract.test.ts.
 */
export const LAYOUTS: Record<StoreConfig['layout'], Layout> = {
  warden: wardenLayout,
  mem0: mem0Layout,
  mastra: mastraLayout,
};

export function layoutFor(store: StoreConfig): Layout {
  return LAYOUTS[store.layout];
}

export function layoutOf(store: StoreHandle): Layout {
  return layoutFor(store.config);
}

/**
 * The layouts that run on PostgreSQL (src/engines/postgres/), each its own folder beside its SQLite code
 * (src/layouts/<name>/postgres/), loaded when a store of it is opened. A layout missing here does not run on
 * PostgreSQL: the config refuses such a store, naming its layout.
 */
export const LAYOUTS_ON_POSTGRES: Partial<Record<StoreConfig['layout'], () => Promise<PostgresLayout>>> = {
  warden: async () => (await import('./warden/postgres/index.js')).wardenOnPostgres,
  mastra: async () => (await import('./mastra/postgres/index.js')).mastraOnPostgres,
};

export async function postgresLayoutFor(store: StoreConfig): Promise<PostgresLayout> {
  const load = LAYOUTS_ON_POSTGRES[store.layout];
  if (!load) throw usageError(`the ${store.layout} layout does not run on PostgreSQL yet`);
  return load();
}

/**
 * The jobs of an opened store's layout on its engine. The registry pairs them: a SQLite handle gets the SQLite layout,
 * a PostgreSQL handle the layout's PostgreSQL implementation, so each method is handed the handle its engine opened.
 */
export async function jobsOf(store: AnyStoreHandle): Promise<LayoutJobs<AnyStoreHandle> & { name: string }> {
  if (store.engine !== 'postgres') return layoutFor(store.config) as LayoutJobs<AnyStoreHandle> & { name: string };
  return (await postgresLayoutFor(store.config)) as unknown as LayoutJobs<AnyStoreHandle> & { name: string };
}
