import type { StoreConfig } from '../store/config.js';
import type { Layout, StoreHandle } from './contract.js';
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
