// yaml, for config-read.ts to require when it parses a file. `npm run build` writes dist/src/vendor/yaml.cjs,
// the package bundled into one file (scripts/vendor.ts); under test this is the package itself.
module.exports = require('yaml');
