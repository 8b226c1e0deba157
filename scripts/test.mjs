// `pnpm test`: mocha, with its verdict kept even when the test process cannot end by itself.
// A test process can be held alive by something no JavaScript can close: isolated-vm keeps a process from exiting
// (even through process.exit) once V8's out-of-memory handler parked one of its isolates, which a memory-bomb test
// may do. scripts/mocha-leaks.cjs then writes mocha's exit code to FABER_TEST_VERDICT and kills its own process;
// this wrapper exits with that code. A death before mocha's verdict (a signal nobody sent on purpose) is a failure;
// one after it is reported on stderr and the verdict kept.
import { spawn } from 'node:child_process'
import { readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { constants, tmpdir } from 'node:os'
import { join } from 'node:path'

const mocha = createRequire(import.meta.url).resolve('mocha/bin/mocha.js')
const verdict = join(tmpdir(), `faber-test-${process.pid}.verdict`)
const child = spawn(process.execPath, [mocha, ...process.argv.slice(2)], {
  stdio: 'inherit',
  env: { ...process.env, FABER_TEST_VERDICT: verdict },
})
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal))
child.on('exit', (code, signal) => {
  let written
  try {
    written = readFileSync(verdict, 'utf8')
    rmSync(verdict)
  } catch {}
  const [, failures, summary] = /^(\d+)\n(.*)/s.exec(written ?? '') ?? []
  if (signal && failures !== undefined) {
    // mocha had finished and given its verdict when the process died. SIGKILL is mocha-leaks.cjs ending a process a
    // leak held; any other signal is a crash during teardown, said here, not hidden: isolated-vm 5.0.4 has aborted
    // twice in a full run (of about ten) with `IsolateEnvironment::GetCurrent(): environment != nullptr`, after the
    // last test, while node tore the process down with isolates a test left alive. it did not reproduce on its own
    if (signal !== 'SIGKILL') {
      process.stderr.write(`\npnpm test: the test process died of ${signal} after mocha gave its verdict (above); the verdict stands\n`)
      process.stdout.write(summary)
    }
    process.exit(Number(failures))
  }
  process.exit(signal ? 128 + (constants.signals[signal] ?? 0) : (code ?? 1))
})
