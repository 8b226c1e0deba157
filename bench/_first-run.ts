// one deployment's start in a process of its own, for bench/nested.ts: what a deployment's first run_code costs can only
// be seen in a fresh process, before anything (an earlier bench included) ran the host's run_code path.
// argv: <worker | isolate> <in-process | process> <ready | immediate>; stdout: one JSON line of figures (ms)
// ready: the first run_code once `ready()` resolved; immediate: right after ctx.start(), while the pool is warming.
// then, in the same process, SETUPS more deployments set up and stopped one after another: a setup once the code is warm
// is the median of the last SETUP_KEPT of them, each timed from new Context() to ctx.start() resolved, its teardown
// (and a pause for what that leaves to do) outside the timed span

import { readFileSync } from 'node:fs'
import ToolRuntime from '@faber/core'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import { Context, Logger } from 'cordis'
import { median, nopTool } from './harness.ts'

Logger.levels.base = 0

const [kind, isolation, mode] = process.argv.slice(2) as ['worker' | 'isolate', 'in-process' | 'process', 'ready' | 'immediate']
const limits = { cpuMs: 5000, wallMs: 30000, memoryMb: 64, outputBytes: 64 * 1024 }
const Sandbox = kind === 'worker' ? WorkerSandboxService : IsolateSandboxService
const nop = nopTool('echo', 'answers at once')
const SETUPS = 40
const SETUP_KEPT = 30

// this thread's cpu ms (Linux: /proc/thread-self/schedstat, ns), which the sandbox's threads do not add to; 0 elsewhere
const threadCpu = () => {
  try {
    return Number(readFileSync('/proc/thread-self/schedstat', 'latin1').split(' ')[0]) / 1e6
  } catch {
    return 0
  }
}

// new Context() to ctx.start() resolved, with the runtime and the sandbox
async function setup() {
  const started = performance.now()
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'code' })
  ctx.plugin(Sandbox, { isolation, limits })
  await ctx.start()
  return { ctx, ms: performance.now() - started }
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
// more deployments in the same process: what setting one up costs once the code is warm. each is stopped before its
// pool makes a unit (that happens on a later turn), and what a stop leaves settles before the next setup is timed
const setups: number[] = []
for (let i = 0; i < SETUPS; i++) {
  const again = await setup()
  setups.push(again.ms)
  await again.ctx.stop()
  await new Promise((resolve) => setTimeout(resolve, 5))
}

process.stdout.write(
  `${JSON.stringify({
    setupMs,
    warmSetupMs: median(setups.slice(-SETUP_KEPT)),
    readyMs,
    firstMs: first.ms,
    firstCpuMs: first.cpuMs,
    warmMs: median(warm.map((w) => w.ms)),
    warmCpuMs: median(warm.map((w) => w.cpuMs)),
    firstThreadMs: first.threadMs,
    warmThreadMs: median(warm.map((w) => w.threadMs)),
  })}\n`,
)
