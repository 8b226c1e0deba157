// --unhandled-rejections=strict, as a check mocha can report: a promise rejection nobody handled fails the run, and
// the failure names the test during which it surfaced. (the flag itself makes mocha crash on the double completion
// of an async test, and failing a root afterEach hook would skip every later test; without any check, mocha
// re-emits a rejection from the code under test to a process with no other listener, where it vanishes)
const seen = new WeakSet()
const reasons = []
const found = []

process.on('unhandledRejection', (reason, promise) => {
  // mocha's own listener re-emits what it does not own: count each promise once
  if (seen.has(promise)) return
  seen.add(promise)
  reasons.push(reason)
})

function collect(where) {
  for (const reason of reasons.splice(0)) found.push(`${where}: ${reason instanceof Error ? reason.stack || reason.message : String(reason)}`)
}

exports.mochaHooks = {
  afterEach() {
    collect(`during "${this.currentTest?.fullTitle()}"`)
  },
  afterAll() {
    collect('after the last test')
    if (found.length) throw new Error(`${found.length} promise rejection(s) left unhandled:\n${found.join('\n---\n')}`)
  },
}
