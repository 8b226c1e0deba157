// After the last test the run must end by itself. A worker, child process, server or timer that a test left behind
// keeps node alive, and CI would only see its timeout, with nothing to say which test leaked what. So once mocha has
// reported, this waits a grace period for what is closing to close; if node is still alive then, it names every
// handle that holds it (on stderr), kills the child processes and workers among them, and ends the process, repeating
// the closing `N passed, N failed` line so it stays the last line printed.
// It ends the process with SIGKILL, not process.exit: isolated-vm blocks process.exit for good once V8's
// out-of-memory handler parked one of its isolates (what holds the process then is no handle JavaScript can see).
// Mocha's exit code is in FABER_TEST_VERDICT by then (the reporter writes it), where scripts/test.mjs reads it.
const { writeSync } = require('node:fs')

const GRACE_MS = Number(process.env.FABER_LEAK_GRACE_MS || 20000)

// timers are no handles node lists: remember where each one made through the globals was set, to name a leaked one
const kWhere = Symbol('faber.leaks.where')
const timers = new Set()
for (const name of ['setTimeout', 'setInterval']) {
  const original = globalThis[name]
  const tracked = function (...args) {
    const timer = original.apply(this, args)
    if (timer && typeof timer === 'object') {
      const where = (new Error().stack || '')
        .split('\n')
        .slice(2)
        .find((line) => !line.includes('node:internal'))
      timer[kWhere] = `${name}(${args[1] ?? 0} ms) ${where ? where.trim() : 'from an unknown place'}`
      timers.add(new WeakRef(timer))
      // keep the set from growing with every timer a long run makes
      if (timers.size > 4096) for (const ref of timers) if (!ref.deref() || ref.deref()._destroyed) timers.delete(ref)
    }
    return timer
  }
  Object.defineProperty(tracked, 'name', { value: name })
  globalThis[name] = Object.assign(tracked, original)
}

function liveTimers() {
  const lines = []
  for (const ref of timers) {
    const timer = ref.deref()
    if (timer && !timer._destroyed && timer.hasRef?.()) lines.push(`timer ${timer[kWhere]}`)
  }
  return lines
}

function describe(handle) {
  const kind = handle?.constructor?.name ?? typeof handle
  try {
    if (kind === 'ChildProcess') return `child process ${handle.pid}: ${(handle.spawnargs || []).join(' ').slice(0, 300)}`
    if (kind === 'Worker') return `worker thread ${handle.threadId}`
    if (kind === 'Server') return `server ${JSON.stringify(handle.address?.())}`
    if (kind === 'Socket' || kind === 'Pipe') {
      if (handle === process.stdout || handle === process.stderr || handle === process.stdin) return null
      const remote = handle.remoteAddress ? ` ${handle.remoteAddress}:${handle.remotePort}` : ''
      const fd = handle._handle?.fd
      return `${kind.toLowerCase()}${remote}${fd !== undefined && fd >= 0 ? ` fd ${fd}` : ''}${handle.destroyed ? ' (destroyed)' : ''}`
    }
    // listed by liveTimers, with where each was set
    if (kind === 'Timeout') return null
    return kind
  } catch (error) {
    return `${kind} (${error})`
  }
}

function report() {
  const handles = process._getActiveHandles()
  const lines = [...handles.map(describe).filter(Boolean), ...liveTimers()]
  if (!lines.length) lines.push('nothing JavaScript can name: an isolated-vm isolate parked by V8 out of memory holds a process so')
  writeSync(
    2,
    `\nLEAK: the tests ended, but ${GRACE_MS / 1000} s later node is still kept alive by what a test left behind:\n` +
      lines.map((line) => `  - ${line}\n`).join('') +
      `  (active resources: ${process.getActiveResourcesInfo().join(', ')})\n` +
      'Find the test that starts it and close it there. Killing the child processes and workers, then this process.\n',
  )
  for (const handle of handles) {
    try {
      if (handle?.constructor?.name === 'ChildProcess') handle.kill('SIGKILL')
      else if (handle?.constructor?.name === 'Worker') handle.terminate()
    } catch {}
  }
  // mocha's verdict is already in FABER_TEST_VERDICT (scripts/mocha-reporter.cjs writes it at run end); with none there
  // (the run never ended) scripts/test.mjs fails the run
  const summary = globalThis[Symbol.for('faber.test-summary')]
  // stdout and stderr are pipes or files in CI: written synchronously, so nothing is lost to the kill
  if (summary) writeSync(1, summary)
  process.kill(process.pid, 'SIGKILL')
}

exports.mochaHooks = {
  afterAll() {
    // unref'd: it fires only while something else keeps the loop alive, which is exactly a leak
    setTimeout(report, GRACE_MS).unref()
  },
}
