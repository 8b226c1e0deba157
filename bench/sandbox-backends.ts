// figures for the two CodeRuntime backends, against an in-process vm baseline measured in the same run.
// run by hand: node --no-node-snapshot --import tsx/esm bench/sandbox-backends.ts

import { setTimeout as sleep } from 'node:timers/promises'
import vm from 'node:vm'
import type { CodeRunLimits, CodeRuntime } from '@faber/core'
import { WorkerSandbox } from '@faber/sandbox'
import { IsolateSandbox } from '@faber/sandbox-isolate'

interface Closable extends CodeRuntime {
  close(): Promise<void>
}

const limits: CodeRunLimits = { cpuMs: 5000, wallMs: 30000, memoryMb: 64, outputBytes: 64 * 1024 }
const trivial = 'return 1 + 1'
const calls = 1000

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
const ms = (value: number) => `${value.toFixed(3)} ms`

async function repeat(n: number, fn: () => Promise<number>) {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push(await fn())
  return out
}

async function time(fn: () => Promise<unknown>) {
  const start = performance.now()
  await fn()
  return performance.now() - start
}

async function baseline() {
  const runs: number[] = []
  for (let i = 0; i < 300; i++) {
    runs.push(
      await time(async () => {
        const context = vm.createContext({})
        await vm.runInContext(`(async function () {\n${trivial}\n})()`, context)
      }),
    )
  }
  return median(runs.slice(50))
}

async function measure(name: string, make: () => Closable, base: number) {
  const signal = new AbortController().signal
  const echo = async (_: string, json: string) => ({ ok: true as const, value: json })
  const request = (code: string) => ({ code, tools: ['echo'], call: echo, signal, limits })

  let runtime = make()
  const cold = await time(() => runtime.run(request(trivial)))
  await runtime.close()
  runtime = make()
  await sleep(100)
  const first = await time(() => runtime.run(request(trivial)))

  const warmMs = median((await repeat(300, () => time(() => runtime.run(request(trivial))))).slice(50))

  const sequential = median(await repeat(5, () => time(() => runtime.run(request(`for (let i = 0; i < ${calls}; i++) await tools.echo({ i })`)))))
  const parallel = median(
    await repeat(5, () => time(() => runtime.run(request(`await Promise.all(Array.from({ length: ${calls} }, (_, i) => tools.echo({ i })))`)))),
  )

  const aborts: number[] = []
  for (let i = 0; i < 10; i++) {
    const controller = new AbortController()
    const outcome = runtime.run({ ...request('while (true) {}'), signal: controller.signal })
    await sleep(30)
    const abortedAt = performance.now()
    controller.abort()
    await outcome
    aborts.push(performance.now() - abortedAt)
    await sleep(60)
  }
  await runtime.close()

  const perCall = (total: number) => `${(((total - warmMs) / calls) * 1000).toFixed(1)} µs`
  console.log(`\n${name}`)
  console.log(`  first run, right after construction   ${ms(cold)}  (${(cold / base).toFixed(0)}x baseline)`)
  console.log(`  first run, 100 ms after construction  ${ms(first)}  (${(first / base).toFixed(0)}x baseline)`)
  console.log(`  warm trivial run (median)             ${ms(warmMs)}  (${(warmMs / base).toFixed(1)}x baseline)`)
  console.log(`  per sequential host call              ${perCall(sequential)}`)
  console.log(`  per host call under Promise.all       ${perCall(parallel)}`)
  console.log(`  abort of a spin, until run resolves   median ${ms(median(aborts))}, max ${ms(Math.max(...aborts))}`)
}

const base = await baseline()
console.log(`baseline: new vm context + trivial async program, in process: ${ms(base)} (median)`)
await measure('worker-vm (@faber/sandbox)', () => new WorkerSandbox({ limits }), base)
await measure('isolated-vm (@faber/sandbox-isolate)', () => new IsolateSandbox({ limits }), base)
