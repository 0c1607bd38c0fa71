/**
 * The import rules, checked by `npm run deps` (and test/deps.test.ts, so `npm test` fails on a
 * violation). Plug points are contracts: features call src/layouts/contract.ts and the registries; an
 * implementation (src/layouts/<name>/, src/vectors/<name>/) imports primitives and contracts only; the engine
 * (src/) is handed the jobs (jobs/) instead of importing them.
 */
/** Feature modules: what uses the plug points. An implementation never imports one. */
const FEATURES = '^src/(digest|drift|commands|queue|review-web|snapshot|erase|job/runner\\.ts|cli\\.ts)';

module.exports = {
  forbidden: [
    {
      name: 'foundation-imports-foundation',
      severity: 'error',
      comment:
        'The ground floor (core: errors and bounded file reads; text: hostile text, secrets, masking; time; log; progress) ' +
        'imports only itself and the vendored packages: everything else may use it, it uses nothing above it.',
      from: { path: '^src/(core|text|time|log|progress)/' },
      to: { path: '^src/', pathNot: '^src/(core|text|time|log|progress|vendor)/' },
    },
    {
      name: 'links-below-digest-and-page',
      severity: 'error',
      comment: 'Link signing is shared by the digest (makes links) and the review page (checks them): it sits below both.',
      from: { path: '^src/links/' },
      to: { path: '^src/', pathNot: '^src/(core|text|time|log|progress|vendor|links)/' },
    },
    {
      name: 'digest-not-review-page',
      severity: 'error',
      comment: 'The digest links to the review page through src/links/, never by importing the page.',
      from: { path: '^src/digest/' },
      to: { path: '^src/review-web/' },
    },
    {
      name: 'config-reads-schemas-only',
      severity: 'error',
      comment:
        "The config composes each part's schema (its config.ts or schema.ts) and the ground floor; it runs no feature.",
      from: { path: '^src/config/' },
      to: {
        path: '^src/',
        pathNot: ['^src/(core|text|time|log|progress|vendor|config)/', '/(config|schema)\\.ts$', '^src/store/(name|files)\\.ts$', '^src/snapshot/root\\.ts$'],
      },
    },
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'No import circle in src or jobs (type-only imports count too: they are the vocabulary).',
      from: { path: '^(src|jobs)/' },
      to: { circular: true },
    },
    {
      name: 'layouts-not-features',
      severity: 'error',
      comment: 'A layout implementation imports primitives (src/store, src/time, ...) and contracts, never a feature.',
      from: { path: '^src/layouts/[^/]+/' },
      to: { path: FEATURES },
    },
    {
      name: 'features-through-contracts',
      severity: 'error',
      comment:
        'A feature (and a job) reaches layouts and vector stores through their contracts and registries, never an ' +
        "implementation's folder. The composition root (src/commands/) may wire a layout's own commands (init, repair).",
      from: { path: [FEATURES, '^jobs/'], pathNot: '^src/commands/' },
      to: { path: ['^src/layouts/[^/]+/', '^src/vectors/[^/]+/'] },
    },
    {
      name: 'layouts-through-vector-contracts',
      severity: 'error',
      comment: 'A layout reaches its vector side through src/vectors/contract.ts and registry.ts, never a vector store\'s folder.',
      from: { path: '^src/layouts/' },
      to: { path: '^src/vectors/[^/]+/' },
    },
    {
      name: 'layouts-not-registry',
      severity: 'error',
      comment: 'A layout implementation is registered, it does not look layouts up (that would close a circle).',
      from: { path: '^src/layouts/[^/]+/' },
      to: { path: '^src/layouts/registry\\.ts$' },
    },
    {
      name: 'vectors-not-features',
      severity: 'error',
      comment: 'A vector store imports primitives and its contract only: no layout, no feature.',
      from: { path: '^src/vectors/' },
      to: { path: [FEATURES, '^src/layouts/'] },
    },
    {
      name: 'engines-below-layouts',
      severity: 'error',
      comment:
        'A store engine (src/engines/) says how a store is kept: it imports primitives (src/store, src/vectors, the ground ' +
        'floor) and never a layout or a feature; layouts say what its tables mean, on top of it.',
      from: { path: '^src/engines/' },
      to: { path: [FEATURES, '^src/layouts/', '^src/job/'] },
    },
    {
      name: 'features-through-engine-contract',
      severity: 'error',
      comment: "A feature (and a job) reaches an engine through src/engines/contract.ts and registry.ts, never an engine's folder.",
      from: { path: [FEATURES, '^jobs/'] },
      to: { path: '^src/engines/[^/]+/' },
    },
    {
      name: 'src-not-jobs',
      severity: 'error',
      comment: 'The runner and worker are handed the job map; only the composition root (src/commands/) imports jobs/.',
      from: { path: '^src/', pathNot: '^src/commands/' },
      to: { path: '^jobs/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|dist)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
