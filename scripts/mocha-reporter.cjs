// the spec reporter, plus the one closing line CI reads: `N passed, N failed`
const Mocha = require('mocha')

const { EVENT_RUN_END } = Mocha.Runner.constants

class FaberReporter extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options)
    runner.once(EVENT_RUN_END, () => {
      const { passes, failures, pending } = runner.stats
      const skipped = pending ? `, ${pending} skipped` : ''
      // registered after the spec reporter's own run-end listener, so this is the last line mocha prints
      const summary = `${passes} passed, ${failures} failed${skipped}\n`
      // kept for mocha-leaks.cjs, which prints it again after its report so it stays the last line
      globalThis[Symbol.for('faber.test-summary')] = summary
      globalThis[Symbol.for('faber.test-failures')] = failures
      process.stdout.write(summary)
    })
  }
}

module.exports = FaberReporter
