// a burst of hostile programs at once against each in-process backend (issue 15's pool): 1,000 runs started together,
// maxConcurrent 8 and poolSize 2, a mix of five programs (a trivial one, a Proxy argument whose traps throw, an argument
// nested 5,000 deep, odd keys after polluting globals and Object.prototype, 50 calls at once), every seventh aborted
// after 2 ms. printed: the units the pool made (× maxConcurrent, the fewest a burst that fills the cap can need), the
// process CPU per run (× one warm trivial run's, alone, measured first in this process), the wall time, the outcomes,
// and whether any run saw another's globals.
// `pnpm bench burst`; BURST_RUNS=200 starts fewer at once

import { type CodeRunLimits, type CodeRunOutcome, WorkerSandbox } from '@faber/sandbox'
import { IsolateSandbox } from '@faber/sandbox-isolate'
import { QuickJsSandbox } from '@faber/sandbox-quickjs'
import { median, row } from './harness.ts'

const RUNS = Number(process.env.BURST_RUNS ?? 1000)
const maxConcurrent = 8
const limits: CodeRunLimits = { cpuMs: 5000, wallMs: 20000, memoryMb: 64, outputBytes: 1 << 16 }
const echo = async (_: string, json: string) => ({ ok: true as const, value: json })
const programs = [
  'return 1',
  'const p = new Proxy({}, { get() { throw new Error("x") }, ownKeys() { throw 1 } }); return await tools.echo(p)',
  'let o = {}; for (let i = 0; i < 5000; i++) o = { o }; return await tools.echo(o)',
  'globalThis.left = 1; Object.prototype.x = 1; return await tools.echo({ ["__proto__"]: 1, "": 2 })',
  'await Promise.all(Array.from({ length: 50 }, (_, i) => tools.echo({ i }))); return typeof left',
]
const cpuMs = (since: NodeJS.CpuUsage) => {
  const used = process.cpuUsage(since)
  return (used.user + used.system) / 1000
}

export async function benchBurst() {
  const figures: Record<string, number> = {}
  console.log(`${RUNS} hostile runs at once, maxConcurrent ${maxConcurrent}, poolSize 2`)
  for (const [name, Sandbox] of [
    ['worker', WorkerSandbox],
    ['isolate', IsolateSandbox],
    ['quickjs', QuickJsSandbox],
  ] as const) {
    const sandbox = new Sandbox({ limits, poolSize: 2, maxConcurrent })
    await sandbox.ready()
    const run = (code: string, signal = new AbortController().signal) => sandbox.run({ code, tools: ['echo'], call: echo, signal, limits })
    // one warm trivial run alone: the CPU a run costs when nothing else is going on
    const alone: number[] = []
    for (let i = 0; i < 20; i++) {
      const since = process.cpuUsage()
      await run('return 1')
      alone.push(cpuMs(since))
    }
    const madeBefore = sandbox.unitsMade
    const since = process.cpuUsage()
    const started = performance.now()
    const outcomes: CodeRunOutcome[] = await Promise.all(
      Array.from({ length: RUNS }, (_, i) => {
        const controller = new AbortController()
        if (i % 7 === 0) setTimeout(() => controller.abort(), 2)
        return run(programs[i % programs.length], controller.signal)
      }),
    )
    const wallMs = performance.now() - started
    const cpu = cpuMs(since)
    const made = sandbox.unitsMade - madeBefore
    const kinds: Record<string, number> = {}
    for (const outcome of outcomes) kinds[outcome.ok ? 'ok' : outcome.kind] = (kinds[outcome.ok ? 'ok' : outcome.kind] ?? 0) + 1
    // the fifth program reports whether it saw the global another run set
    const leaked = outcomes.filter((outcome, i) => i % programs.length === 4 && outcome.ok && outcome.result !== '"undefined"').length
    const after = await run('return [typeof left, ({}).x ?? null]')
    await sandbox.close()
    const perRun = cpu / RUNS
    console.log(
      `  ${`${name}: units made during the burst`.padEnd(48)} ${String(made).padStart(11)}  ${`${(made / maxConcurrent).toFixed(1)}× maxConcurrent`.padStart(16)}`,
    )
    row(`${name}: process CPU per run in the burst`, perRun * 1000, median(alone) * 1000)
    console.log(`  ${''.padEnd(48)} × a warm trivial run alone (${median(alone).toFixed(2)} ms); wall ${(wallMs / 1000).toFixed(1)} s in all`)
    console.log(
      `  ${''.padEnd(48)} outcomes ${JSON.stringify(kinds)}; runs that saw another's global: ${leaked}; a run after them saw ${after.ok ? after.result : after.message}`,
    )
    Object.assign(figures, { [`${name}.unitsMade`]: made, [`${name}.cpuPerRunMs`]: perRun, [`${name}.wallMs`]: wallMs, [`${name}.leaked`]: leaked })
  }
  return figures
}
