// what the seam between callers and the pipeline costs: plain `ctx.tools.execute` (ctx.tools read on every call, as
// users write it) against a held reference, and the run_code bridge's own cost per sequential nested call, measured
// with an in-process code runtime that calls its bindings directly, so no sandbox hand-off is in the figure.

import { Logger } from 'cordis'
import { addTool, isMain, row, seamDeployment, timeOp } from './harness.ts'

Logger.levels.base = 0

const ITERATIONS = 20000
const NESTED = 2000

export async function benchSeam() {
  const args = { a: 1, b: 2 }
  const signal = new AbortController().signal
  const run = { signal } as never

  const add = addTool('add', { concurrencySafe: true })
  const ctx = await seamDeployment(NESTED)

  const direct = await timeOp(() => add.execute(args, run), ITERATIONS)
  const held = ctx.tools
  const heldExecute = await timeOp(() => held.execute({ callId: 'c', name: 'add', arguments: args, signal }), ITERATIONS)
  const plainExecute = await timeOp(() => ctx.tools.execute({ callId: 'c', name: 'add', arguments: args, signal }), ITERATIONS)
  const executor = ctx.tools.executor
  const executorExecute = await timeOp(() => executor.execute({ callId: 'c', name: 'add', arguments: args, signal }), ITERATIONS)
  // one run_code makes NESTED sequential nested calls: per nested call, bridge plus pipeline, no sandbox
  const program = { code: 'return 3', description: 'bench' }
  const perRun = await timeOp(() => held.execute({ callId: 'r', name: 'run_code', arguments: program, signal }), 20, 5)
  const bridge = perRun / NESTED

  console.log('seam: ctx.tools.execute as users write it, and the run_code bridge without a sandbox')
  row('baseline: the tool body called directly', direct, direct)
  row('execute through a held ctx.tools', heldExecute, direct, '≤ 3 µs')
  row('plain ctx.tools.execute (ctx.tools read per call)', plainExecute, direct)
  // cordis' tracing proxy and captured stack per read of ctx.tools: the framework's cost, not Faber's path
  row("  of it cordis' read of ctx.tools (plain − held)", plainExecute - heldExecute, direct)
  row('execute through ctx.tools.executor', executorExecute, direct)
  row('nested call: bridge + pipeline, no sandbox', bridge, direct, '≤ 5 µs')
  row("the bridge's own share (nested − executor.execute)", bridge - executorExecute, direct)
  console.log(`  plain / held: ${(plainExecute / heldExecute).toFixed(2)}×`)
  await ctx.stop()
  return { directUs: direct, heldExecuteUs: heldExecute, plainExecuteUs: plainExecute, executorExecuteUs: executorExecute, bridgePerNestedCallUs: bridge }
}

if (isMain(import.meta.url)) await benchSeam()
