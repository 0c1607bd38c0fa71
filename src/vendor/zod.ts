/**
 * zod, as every module of this project imports it. `npm run build` replaces what tsc emits for this file with
 * zod bundled into one file (scripts/vendor.ts): loading modules is most of a command's start-up on Node 20, and
 * zod is 95 of them. Under test, and without the bundler, this is the package itself.
 */
export * from 'zod';
