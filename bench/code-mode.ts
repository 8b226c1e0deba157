// Code Mode's costs: a trivial run_code (first in process and warm) on each backend, per nested call (sequential
// and under Promise.all), and the SDK for 10/100/1000 tools through the registry (fresh after a change, and
// unchanged, served from the generation cache). each figure is printed against a floor measured in the same run.

import { runInNewContext } from 'node:vm'
import ToolRuntime, { defineTool, t } from '@faber/core'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import { Context, Logger } from 'cordis'
import { isMain, nopTool, row, timeOp } from './harness.ts'

Logger.levels.base = 0

const nop = nopTool('nop', 'does nothing, safely')

async function deployment(backend: 'worker' | 'isolate', isolation: 'in-process' | 'process') {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'code', maxParallelSubCalls: 64 })
  ctx.plugin(backend === 'worker' ? WorkerSandboxService : IsolateSandboxService, { poolSize: 2, isolation })
  await ctx.start()
  ctx.tools.register(nop)
  return ctx
}

let ids = 0
// reading ctx.tools goes through cordis' service proxy (tens of µs); hot callers hold the reference, as the bench does
const held = new WeakMap<Context, Context['tools']>()
function toolsOf(ctx: Context) {
  let tools = held.get(ctx)
  if (!tools) held.set(ctx, (tools = ctx.tools))
  return tools
}
async function run(ctx: Context, code: string) {
  const result = await toolsOf(ctx).execute({
    callId: `b${++ids}`,
    name: 'run_code',
    arguments: { code, description: 'bench' },
    signal: new AbortController().signal,
  })
  if (result.isError) throw new Error(result.content)
  return result
}

function syntheticTool(i: number) {
  return defineTool({
    name: `tool_${i}`,
    description: `synthetic tool ${i} with a few typed arguments`,
    parameters: t.object({ path: t.string(), limit: t.integer({ minimum: 1 }).optional(), mode: t.enum(['a', 'b', 'c']) }),
    output: { schema: t.object({ lines: t.array(t.string()), truncated: t.boolean() }) },
    execute: () => ({ lines: [], truncated: false }),
  })
}

export async function benchCodeMode() {
  const figures: Record<string, number> = {}
  console.log('code mode')
  const floorVm = await timeOp(() => runInNewContext('(async () => 1)()'), 200)
  row('floor: vm.runInNewContext of a trivial program', floorVm, floorVm)

  // each backend on both tiers, named: the services' default is the process tier (a child process, and ipc for every
  // call), which came after these targets were set for the in-process tier; they are printed beside that tier only
  for (const backend of ['worker', 'isolate'] as const) {
    for (const isolation of ['in-process', 'process'] as const) {
      const label = `${backend}, ${isolation === 'process' ? 'process tier (the default)' : 'in-process'}`
      const target = (figure: string) => (isolation === 'in-process' ? figure : undefined)
      const started = performance.now()
      const ctx = await deployment(backend, isolation)
      await run(ctx, 'return 1')
      const first = (performance.now() - started) * 1000
      const warm = await timeOp(() => run(ctx, 'return 1'), 50)
      row(`${label}: run_code trivial, first in process (incl. start)`, first, floorVm, target('≤ 40 ms'))
      row(`${label}: run_code trivial, warm`, warm, floorVm, target(backend === 'worker' ? '≤ 3 ms' : '≤ 1.5 ms'))

      const tools = toolsOf(ctx)
      const signal = new AbortController().signal
      const direct = await timeOp(() => tools.execute({ callId: 'd', name: 'nop', arguments: {}, signal }), 2000)
      const sequential = ((await timeOp(() => run(ctx, 'for (let i = 0; i < 1000; i++) await tools.nop({ i })'), 3, 3)) - warm) / 1000
      const parallel = ((await timeOp(() => run(ctx, 'await Promise.all(Array.from({ length: 1000 }, (_, i) => tools.nop({ i })))'), 3, 3)) - warm) / 1000
      row(`${label}: floor, one direct (collapsed) execute`, direct, direct)
      row(`${label}: per nested call, 1000 sequential`, sequential, direct, target('≤ 40 µs'))
      row(`${label}: per nested call, 1000 under Promise.all`, parallel, direct, target('≤ 15 µs'))
      const key = isolation === 'process' ? `${backend}.process` : backend
      Object.assign(figures, {
        [`${key}.firstMs`]: first / 1000,
        [`${key}.warmMs`]: warm / 1000,
        [`${key}.nestedSequentialUs`]: sequential,
        [`${key}.nestedParallelUs`]: parallel,
      })
      await ctx.stop()
    }
  }

  // the optional pre-run type-check: a program checked against the SDK, against the same run unchecked
  for (const typecheck of [false, true]) {
    const ctx = new Context()
    ctx.plugin(ToolRuntime, { mode: 'code', typecheck })
    ctx.plugin(WorkerSandboxService, { poolSize: 2 })
    await ctx.start()
    for (let i = 0; i < 20; i++) ctx.tools.register(syntheticTool(i))
    const program = 'const r = await tools.tool_1({ path: "a", mode: "b" })\nreturn r.lines.length'
    const started = performance.now()
    await run(ctx, program)
    const first = (performance.now() - started) * 1000
    const warm = await timeOp(() => run(ctx, program), 20, 3)
    figures[`typecheck.${typecheck}.warmMs`] = warm / 1000
    if (typecheck) {
      row('run_code with typecheck on, first (loads the compiler)', first, figures['typecheck.false.warmMs'] * 1000)
      row('run_code with typecheck on, warm (20-tool SDK)', warm, figures['typecheck.false.warmMs'] * 1000)
    } else row('floor: the same run_code with typecheck off', warm, warm)
    await ctx.stop()
  }

  for (const size of [10, 100, 1000]) {
    const ctx = new Context()
    ctx.plugin(ToolRuntime, { mode: 'code' })
    await ctx.start()
    const definitions = Array.from({ length: size }, (_, i) => syntheticTool(i))
    for (const tool of definitions) ctx.tools.register(tool)
    const tools = toolsOf(ctx)
    const schemas = tools.schemas()
    const floor = await timeOp(() => JSON.stringify(schemas), 20)
    // a registration and its disposal each start a new generation, after which the SDK is rendered afresh;
    // the cost of the change itself (and of the view it forces) is measured alone and subtracted
    const extra = syntheticTool(size + 1)
    const change = await timeOp(() => {
      tools.register(extra)()
      tools.schemas()
    }, 20)
    const changeAndRender = await timeOp(() => {
      tools.register(extra)()
      tools.schemas()
      tools.sdkDeclarations()
    }, 20)
    const fresh = Math.max(0, changeAndRender - change)
    const unchanged = await timeOp(() => tools.sdkDeclarations(), 2000)
    row(`SDK for ${size} tools, fresh after a change`, fresh, floor, size === 1000 ? '≤ 5 ms' : undefined)
    row(`SDK for ${size} tools, unchanged (cached)`, unchanged, floor)
    figures[`sdk.${size}.freshMs`] = fresh / 1000
    figures[`sdk.${size}.unchangedUs`] = unchanged
    await ctx.stop()
  }
  row('floor (above): JSON.stringify of the same schemas', 1, 1)
  return figures
}

if (isMain(import.meta.url)) await benchCodeMode()
