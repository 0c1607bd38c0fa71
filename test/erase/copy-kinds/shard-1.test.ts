// One part of the suite "erase finds every kind of copy" (suite.ts): the rows of this shard's kinds of store.
import { copyKindsSuite } from './suite.js';

copyKindsSuite(import.meta.url);
