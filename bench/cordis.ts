// what Faber's seam with cordis costs: a deployment's setup (new Context() to ctx.start() resolved) against cordis'
// own floor, a call written inline as users write it (ctx.tools read on every call), the executor a hot caller holds,
// and a run_code program's sequential nested calls (an in-process code runtime: no sandbox hand-off in the figure),
// with the cordis costs under them: one read of ctx.tools, one call of a listener cordis bound.

import ToolRuntime, { createAgent } from '@faber/core'
import Approval from '@faber/plugin-approval'
import Guards from '@faber/plugin-guards'
import { Context, type Events, Logger } from 'cordis'
import { addTool, isMain, median, row, seamDeployment, timeOp } from './harness.ts'

Logger.levels.base = 0

const ITERATIONS = 20000
const NESTED = 2000
const SETUPS = Number(process.env.CORDIS_SETUPS ?? 60)

const add = addTool('add', { concurrencySafe: true })

// a deployment as the README composes one: the runtime, guards, approval, an agent made by a plugin of its own
async function deployment(floor: boolean) {
  const ctx = new Context()
  if (!floor) {
    ctx.plugin(ToolRuntime, { mode: 'both' })
    ctx.plugin(Guards, { deny: [{ tools: ['rm'], reason: 'remove files one by one' }] })
    ctx.plugin(Approval, { require: ['danger'] })
    ctx.plugin({
      name: 'bench-agent',
      inject: ['tools'],
      apply(ctx: Context) {
        const agent = createAgent(ctx, { name: 'worker' })
        agent.ctx.tools.register(add)
      },
    })
  }
  await ctx.start()
  return ctx
}

async function setupMs(floor: boolean) {
  const times: number[] = []
  for (let i = 0; i < SETUPS; i++) {
    const start = performance.now()
    const ctx = await deployment(floor)
    times.push(performance.now() - start)
    await ctx.stop()
  }
  // the first setups warm the code
  return median(times.slice(Math.floor(SETUPS / 4)))
}

export async function benchCordis() {
  const args = { a: 1, b: 2 }
  const signal = new AbortController().signal
  const run = { signal } as never

  const floorSetup = await setupMs(true)
  const setup = await setupMs(false)

  const ctx = await seamDeployment(NESTED)
  ctx.on('bench/noop' as keyof Events, () => undefined)

  const direct = await timeOp(() => add.execute(args, run), ITERATIONS)
  const read = await timeOp(() => ctx.tools, ITERATIONS)
  const listener = await timeOp(() => ctx.emit('bench/noop' as keyof Events, args as never), ITERATIONS)
  const inline = await timeOp(() => ctx.tools.execute({ callId: 'c', name: 'add', arguments: args, signal }), ITERATIONS)
  const executor = ctx.tools.executor
  const held = await timeOp(() => executor.execute({ callId: 'c', name: 'add', arguments: args, signal }), ITERATIONS)
  const program = { code: 'return 3', description: 'bench' }
  const perRun = await timeOp(() => executor.execute({ callId: 'r', name: 'run_code', arguments: program, signal }), 20, 5)
  const nested = perRun / NESTED

  // the same with one pre-execute listener registered through ctx.on, as a policy plugin does
  ctx.on('tools/pre-execute', (exec) => (exec.name === 'rm' ? { kind: 'deny', reason: 'no' } : undefined))
  const heldListened = await timeOp(() => executor.execute({ callId: 'c', name: 'add', arguments: args, signal }), ITERATIONS)
  await ctx.stop()

  console.log("cordis: Faber's seam with cordis")
  row('baseline: the tool body called directly', direct, direct)
  row('setup floor: new Context() + start, no plugin', floorSetup * 1000, direct)
  row('setup: runtime, guards, approval, an agent', setup * 1000, direct)
  row('one read of ctx.tools', read, direct)
  row('ctx.emit of an event with one listener', listener, direct)
  row('ctx.tools.execute written inline', inline, direct)
  row('the held executor (ctx.tools.executor)', held, direct)
  row('held executor, one ctx.on pre-execute listener', heldListened, direct)
  row('a sequential nested call (no sandbox)', nested, direct)
  return {
    directUs: direct,
    setupFloorMs: floorSetup,
    setupMs: setup,
    toolsReadUs: read,
    emitOneListenerUs: listener,
    inlineExecuteUs: inline,
    heldExecutorUs: held,
    heldExecutorListenedUs: heldListened,
    nestedCallUs: nested,
  }
}

if (isMain(import.meta.url)) await benchCordis()
