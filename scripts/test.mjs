// `pnpm test`: mocha, with its verdict kept even when the test process cannot end by itself.
// A test process can be held alive by something no JavaScript can close: isolated-vm keeps a process from exiting
// (even through process.exit) once V8's out-of-memory handler parked one of its isolates, which a memory-bomb test
// may do. scripts/mocha-leaks.cjs then writes mocha's exit code to FABER_TEST_VERDICT and kills its own process;
// this wrapper exits with that code. Any other death (a signal nobody sent on purpose) is a failure.
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
  if (signal && written !== undefined && /^\d+$/.test(written)) process.exit(Number(written))
  process.exit(signal ? 128 + (constants.signals[signal] ?? 0) : (code ?? 1))
})
