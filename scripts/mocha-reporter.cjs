// the spec reporter, plus the one closing line CI reads: `N passed, N failed`
const { writeFileSync } = require('node:fs')
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
      // the verdict, for scripts/test.mjs: it stands if the process dies after this line (see there)
      if (process.env.FABER_TEST_VERDICT) writeFileSync(process.env.FABER_TEST_VERDICT, `${Math.min(failures, 255)}\n${summary}`)
    })
  }
}

module.exports = FaberReporter
