// a spec (or test fixture) path on the command line replaces the default globs instead of adding to them
const specArgs = process.argv.slice(2).some((a) => /\.(spec|fixture)\.ts$/.test(a))

module.exports = {
  spec: specArgs ? [] : ['packages/*/tests/**/*.spec.ts', 'plugins/*/tests/**/*.spec.ts', 'examples/*/tests/**/*.spec.ts', 'test/**/*.spec.ts'],
  extension: ['ts'],
  require: ['tsx/esm', './scripts/mocha-unhandled.cjs', './scripts/mocha-leaks.cjs'],
  'node-option': ['no-node-snapshot'],
  reporter: './scripts/mocha-reporter.cjs',
  'fail-zero': true,
  timeout: 20000,
}
