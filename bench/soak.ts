// `pnpm bench soak`: the sandboxes under sustained and concurrent load, not in CI.
// - soak: SOAK_RUNS (default 5000) trivial runs per backend and tier, failures, host RSS and heap every 500 runs
//   (and the sandbox process's RSS on the process tier)
// - concurrency: 200 runs started at once, each holding ~8 MB for a moment: peak threads and RSS against the cap
// - hop: what the process tier adds to each nested call, against the in-process tier measured in the same run

import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import type { BridgeReply, CodeRunLimits } from '@faber/core'
import { type Pool, ProcessSandbox, WorkerSandbox, workerBackend } from '@faber/sandbox'
import { IsolateSandbox, isolateBackend } from '@faber/sandbox-isolate'
import { QuickJsSandbox, quickJsBackend } from '@faber/sandbox-quickjs'

const limits: CodeRunLimits = { cpuMs: 5000, wallMs: 30000, memoryMb: 64, outputBytes: 64 * 1024 }
const runs = Number(process.env.SOAK_RUNS ?? 5000)
const backends = {
  'worker-vm': {
    inProcess: (maxConcurrent?: number) => new WorkerSandbox({ limits, maxConcurrent }),
    backend: workerBackend,
  },
  'isolated-vm': {
    inProcess: (maxConcurrent?: number) => new IsolateSandbox({ limits, maxConcurrent }),
    backend: isolateBackend,
  },
  'quickjs-wasm': {
    inProcess: (maxConcurrent?: number) => new QuickJsSandbox({ limits, maxConcurrent }),
    backend: quickJsBackend,
  },
}
type Backend = keyof typeof backends

const make = (backend: Backend, tier: 'in-process' | 'process', maxConcurrent?: number): Pool & { pid?: number } => {
  const { inProcess, backend: processBackend } = backends[backend]
  return tier === 'process' ? new ProcessSandbox({ backend: processBackend, limits, maxConcurrent }) : inProcess(maxConcurrent)
}

const echo = async (_: string, json: string): Promise<BridgeReply> => ({ ok: true, value: json })
const request = (code: string) => ({ code, tools: ['echo'], call: echo, signal: new AbortController().signal })
const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MB`
const status = (pid: number | string, field: 'VmRSS' | 'Threads') => {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith(`${field}:`))
    return Number(line?.split(/\s+/)[1] ?? 0)
  } catch {
    return 0
  }
}

export async function benchSoak() {
  const figures: Record<string, unknown> = {}
  for (const backend of Object.keys(backends) as Backend[]) {
    for (const tier of ['in-process', 'process'] as const) {
      const sandbox = make(backend, tier)
      const failures: string[] = []
      const start = performance.now()
      const rss0 = process.memoryUsage().rss
      console.log(`\n${backend}, ${tier} tier: ${runs} runs of a trivial program`)
      for (let i = 1; i <= runs; i++) {
        const outcome = await sandbox.run(request('const a = [1, 2, 3].map((x) => x * 2)\nreturn a.length'))
        if (!outcome.ok) failures.push(`run ${i}: ${outcome.kind}: ${outcome.message}`)
        if (i % 500 === 0) {
          const { rss, heapUsed } = process.memoryUsage()
          const child = sandbox.pid ? `, sandbox process RSS ${(status(sandbox.pid, 'VmRSS') / 1024).toFixed(0)} MB` : ''
          console.log(`  ${String(i).padStart(5)} runs  failures ${failures.length}  host RSS ${mb(rss)}  host heap ${mb(heapUsed)}${child}`)
        }
      }
      const ms = (performance.now() - start) / runs
      for (const failure of failures.slice(0, 5)) console.log(`  ${failure}`)
      console.log(`  ${ms.toFixed(2)} ms per run, host RSS ${mb(rss0)} → ${mb(process.memoryUsage().rss)}`)
      figures[`${backend}/${tier}`] = { failures: failures.length, msPerRun: ms }
      await sandbox.close()
    }
  }
  return figures
}

export async function benchConcurrency() {
  const figures: Record<string, unknown> = {}
  const n = 200
  // each program holds ~8 MB for a moment, so what the cap admits shows in the memory
  const program = 'const keep = new Float64Array(1 << 20).fill(1)\nawait tools.echo({})\nreturn keep.length'
  for (const backend of Object.keys(backends) as Backend[]) {
    for (const tier of ['in-process', 'process'] as const) {
      const sandbox = make(backend, tier)
      await sandbox.run(request('return 1'))
      await sleep(200)
      const threads0 = status('self', 'Threads') + (sandbox.pid ? status(sandbox.pid, 'Threads') : 0)
      const rss0 = process.memoryUsage().rss + (sandbox.pid ? status(sandbox.pid, 'VmRSS') * 1024 : 0)
      let peakThreads = threads0
      let peakRss = rss0
      let done = false
      const sample = (async () => {
        while (!done) {
          peakThreads = Math.max(peakThreads, status('self', 'Threads') + (sandbox.pid ? status(sandbox.pid, 'Threads') : 0))
          peakRss = Math.max(peakRss, process.memoryUsage().rss + (sandbox.pid ? status(sandbox.pid, 'VmRSS') * 1024 : 0))
          await sleep(5)
        }
      })()
      const start = performance.now()
      const outcomes = await Promise.all(Array.from({ length: n }, () => sandbox.run(request(program))))
      const elapsed = performance.now() - start
      done = true
      await sample
      const load = sandbox.load()
      const failed = outcomes.filter((o) => !o.ok).length
      console.log(
        `${backend}, ${tier} tier: ${n} concurrent runs under a cap of ${load.maxConcurrent}: ${failed} failed, ${elapsed.toFixed(0)} ms, ` +
          `peak running ${load.peakRunning}, peak queued ${load.peakQueued}, threads ${threads0} → peak ${peakThreads}, RSS ${mb(rss0)} → peak ${mb(peakRss)}`,
      )
      figures[`${backend}/${tier}`] = { failed, peakThreads, threads0, peakRssMb: peakRss / 1048576, rss0Mb: rss0 / 1048576, ...load }
      await sandbox.close()
    }
  }
  return figures
}

export async function benchHop() {
  const figures: Record<string, unknown> = {}
  const calls = 1000
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
  for (const backend of Object.keys(backends) as Backend[]) {
    const perCall: Record<string, number> = {}
    for (const tier of ['in-process', 'process'] as const) {
      const sandbox = make(backend, tier)
      const time = async (code: string) => {
        const start = performance.now()
        const outcome = await sandbox.run(request(code))
        if (!outcome.ok) throw new Error(outcome.message)
        return performance.now() - start
      }
      for (let i = 0; i < 20; i++) await time('return 1')
      const trivial = median(await Promise.all(Array.from({ length: 1 }, () => time('return 1'))))
      const samples: number[] = []
      for (let i = 0; i < 5; i++) samples.push(await time(`for (let i = 0; i < ${calls}; i++) await tools.echo({ i })`))
      perCall[tier] = ((median(samples) - trivial) / calls) * 1000
      await sandbox.close()
    }
    const extra = perCall.process - perCall['in-process']
    console.log(
      `${backend}: per sequential nested call ${perCall['in-process'].toFixed(1)} µs in-process (baseline), ${perCall.process.toFixed(1)} µs on the process tier ` +
        `(${(perCall.process / perCall['in-process']).toFixed(1)}× baseline, +${extra.toFixed(1)} µs for the hop)`,
    )
    figures[backend] = perCall
  }
  return figures
}
