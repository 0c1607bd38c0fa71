// One part of the suite "a store is changed only where it lives" (suite.ts): this shard's kinds of store.
import { fleetElsewhereSuite } from './suite.js';

fleetElsewhereSuite(import.meta.url);
