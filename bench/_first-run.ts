// one deployment's start in a process of its own, for bench/nested.ts: what a deployment's first run_code costs can only
// be seen in a fresh process, before anything (an earlier bench included) ran the host's run_code path.
// argv: <worker | isolate> <in-process | process> <ready | immediate>; stdout: one JSON line of figures (ms)
// ready: the first run_code once `ready()` resolved; immediate: right after ctx.start(), while the pool is warming

import ToolRuntime, { defineTool, t } from '@faber/core'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0

const [kind, isolation, mode] = process.argv.slice(2) as ['worker' | 'isolate', 'in-process' | 'process', 'ready' | 'immediate']
const limits = { cpuMs: 5000, wallMs: 30000, memoryMb: 64, outputBytes: 64 * 1024 }
const Sandbox = kind === 'worker' ? WorkerSandboxService : IsolateSandboxService
const nop = defineTool({
  name: 'echo',
  description: 'answers at once',
  parameters: t.object({ i: t.integer().optional() }),
  output: { schema: t.null() },
  isConcurrencySafe: () => true,
  execute: () => null,
})
const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]

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
  const started = performance.now()
  const code = `return ${++ids}`
  const result = await tools.execute({ callId: `f${ids}`, name: 'run_code', arguments: { code, description: 'bench' }, signal })
  const ms = performance.now() - started
  const used = process.cpuUsage(cpu)
  if (result.isError) throw new Error(result.content)
  return { ms, cpuMs: (used.user + used.system) / 1000 }
}

let readyMs: number | undefined
if (mode === 'ready') {
  const started = performance.now()
  await (ctx.get('codeRuntime') as unknown as { ready(): Promise<void> }).ready()
  readyMs = performance.now() - started
}
const first = await run()
const warm: { ms: number; cpuMs: number }[] = []
for (let i = 0; i < 30; i++) warm.push(await run())
await ctx.stop()
// a second deployment in the same process: what setting one up costs once the code is warm
const again = await setup()
await again.ctx.stop()

process.stdout.write(
  `${JSON.stringify({
    setupMs,
    warmSetupMs: again.ms,
    readyMs,
    firstMs: first.ms,
    firstCpuMs: first.cpuMs,
    warmMs: median(warm.map((w) => w.ms)),
    warmCpuMs: median(warm.map((w) => w.cpuMs)),
  })}\n`,
)
