// one deployment's start in a process of its own, for bench/nested.ts: what a deployment's first run_code costs can only
// be seen in a fresh process, before anything (an earlier bench included) ran the host's run_code path.
// argv: <worker | isolate> <in-process | process> <ready | immediate>; stdout: one JSON line of figures (ms)
// ready: the first run_code once `ready()` resolved; immediate: right after ctx.start(), while the pool is warming.
// then, in the same process, more deployments set up and stopped one after another, once the code is warm. a context
// setup is timed from `new Context()` to `ctx.start()` resolved, with the runtime and the sandbox: the services are
// exposed and a run_code may be called (it waits for a unit if the pool has none yet); the pool's units and the
// background warm-up come on later turns and are not in it. its teardown is outside the timed span. rounds alternate:
// - spaced (the figure compared with the reference): each setup follows a 5 ms sleep, as a deployment set up now and
//   then in a long-lived host finds the machine: what the stop left (its disposals, the gc tasks it queued) has run,
//   and the cpu has served other threads meanwhile;
// - back to back: each setup right after the previous one's stop (the way the earlier row was measured). its span
//   takes in work the stop left queued: its thread cpu measured 1.4-1.6x the spaced setup's in the same rounds;
// - the cordis floor, spaced: the same Context with two services that do nothing (what any runtime and sandbox built
//   as cordis services pay before their own constructors run), so that setup − floor is what Faber adds. it is cordis
//   as this process runs it: with @faber/core loaded, whose cordis.ts answers cordis' context proxy handler (the same
//   answers without the shadow contexts and stacks nobody reads: 7.5-8.4 ms before, about a third of that after).
// each setup's own thread cpu is kept too (on a loaded machine its wall time is mostly waiting for a core), and the
// setups a garbage collection fell into are counted (a gc's pause is then in the span)

import { readFileSync } from 'node:fs'
import { PerformanceObserver } from 'node:perf_hooks'
import ToolRuntime from '@faber/core'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import { Context, Logger, Service } from 'cordis'
import { median, nopTool } from './harness.ts'

Logger.levels.base = 0

const [kind, isolation, mode] = process.argv.slice(2) as ['worker' | 'isolate', 'in-process' | 'process', 'ready' | 'immediate']
const limits = { cpuMs: 5000, wallMs: 30000, memoryMb: 64, outputBytes: 64 * 1024 }
const Sandbox = kind === 'worker' ? WorkerSandboxService : IsolateSandboxService
const nop = nopTool('echo', 'answers at once')
// rounds of setups, each round one setup of every kind; the first ones warm the code and are not kept
const SETUP_ROUNDS = 40
const SETUP_KEPT = 30

// this thread's cpu ms (Linux: /proc/thread-self/schedstat, ns), which the sandbox's threads do not add to; 0 elsewhere
const threadCpu = () => {
  try {
    return Number(readFileSync('/proc/thread-self/schedstat', 'latin1').split(' ')[0]) / 1e6
  } catch {
    return 0
  }
}

// services that do nothing: the cordis floor of a context with two services
class Idle extends Service {
  constructor(ctx: Context) {
    super(ctx, 'idle', true)
  }
}
class Idle2 extends Service {
  constructor(ctx: Context) {
    super(ctx, 'idle2', true)
  }
}

// new Context() to ctx.start() resolved, with the runtime and the sandbox (floor: two services that do nothing)
async function setup(floor = false) {
  const thread = threadCpu()
  const started = performance.now()
  const ctx = new Context()
  if (floor) {
    ctx.plugin(Idle)
    ctx.plugin(Idle2)
  } else {
    ctx.plugin(ToolRuntime, { mode: 'code' })
    ctx.plugin(Sandbox, { isolation, limits })
  }
  await ctx.start()
  const ended = performance.now()
  return { ctx, ms: ended - started, threadMs: threadCpu() - thread, started, ended }
}

const { ctx, ms: setupMs } = await setup()
ctx.tools.register(nop)
const tools = ctx.tools
const signal = new AbortController().signal
let ids = 0
// wall ms, and the host process's cpu ms (all its threads; under the process tier not the sandbox process's). each run
// a program of its own, as a model's are: the same text every time would have V8's compilation cache serve the warm
// runs (in the sandbox) what the first one compiled
const run = async () => {
  const cpu = process.cpuUsage()
  const thread = threadCpu()
  const started = performance.now()
  const code = `return ${++ids}`
  const result = await tools.execute({ callId: `f${ids}`, name: 'run_code', arguments: { code, description: 'bench' }, signal })
  const ms = performance.now() - started
  const used = process.cpuUsage(cpu)
  const threadMs = threadCpu() - thread
  if (result.isError) throw new Error(result.content)
  return { ms, cpuMs: (used.user + used.system) / 1000, threadMs }
}

let readyMs: number | undefined
if (mode === 'ready') {
  const started = performance.now()
  await (ctx.get('codeRuntime') as unknown as { ready(): Promise<void> }).ready()
  readyMs = performance.now() - started
}
const first = await run()
const warm: { ms: number; cpuMs: number; threadMs: number }[] = []
for (let i = 0; i < 30; i++) warm.push(await run())
await ctx.stop()
// more deployments in the same process, once the code is warm (see the top of this file). each is stopped before its
// pool makes a unit (that happens on a later turn)
const gcs: { start: number; end: number }[] = []
const observer = new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) gcs.push({ start: entry.startTime, end: entry.startTime + entry.duration })
})
observer.observe({ entryTypes: ['gc'] })
const kinds = {
  spaced: { floor: false, pause: true },
  backToBack: { floor: false, pause: false },
  floor: { floor: true, pause: true },
}
const setups: Record<keyof typeof kinds, { ms: number; threadMs: number; started: number; ended: number }[]> = { spaced: [], backToBack: [], floor: [] }
const pause = () => new Promise((resolve) => setTimeout(resolve, 5))
for (let round = 0; round < SETUP_ROUNDS; round++) {
  for (const [kind, { floor, pause: spaced }] of Object.entries(kinds) as [keyof typeof kinds, (typeof kinds)['spaced']][]) {
    if (spaced) await pause()
    const { ctx, ...figures } = await setup(floor)
    await ctx.stop()
    if (round >= SETUP_ROUNDS - SETUP_KEPT) setups[kind].push(figures)
  }
}
// the gc entries of the last setups are delivered on a later turn
await pause()
observer.disconnect()
const of = (kind: keyof typeof kinds) => {
  const kept = setups[kind]
  const gcIn = kept.filter(({ started, ended }) => gcs.some((gc) => gc.end > started && gc.start < ended)).length
  return { ms: median(kept.map((s) => s.ms)), threadMs: median(kept.map((s) => s.threadMs)), gcIn }
}
const spaced = of('spaced')
const backToBack = of('backToBack')
const floor = of('floor')

process.stdout.write(
  `${JSON.stringify({
    setupMs,
    warmSetupMs: spaced.ms,
    warmSetupThreadMs: spaced.threadMs,
    backToBackSetupMs: backToBack.ms,
    backToBackSetupThreadMs: backToBack.threadMs,
    floorSetupMs: floor.ms,
    floorSetupThreadMs: floor.threadMs,
    setupsWithGc: spaced.gcIn + backToBack.gcIn + floor.gcIn,
    readyMs,
    firstMs: first.ms,
    firstCpuMs: first.cpuMs,
    warmMs: median(warm.map((w) => w.ms)),
    warmCpuMs: median(warm.map((w) => w.cpuMs)),
    firstThreadMs: first.threadMs,
    warmThreadMs: median(warm.map((w) => w.threadMs)),
  })}\n`,
)
