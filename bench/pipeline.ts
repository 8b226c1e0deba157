// per-call cost of ctx.tools.execute for a trivial tool, against calling the tool body directly in the same process.

import ToolRuntime, { createAgent, listenersFor } from '@faber/core'
import { Context, Logger } from 'cordis'
import { addTool, faberPart, isMain, row, timeAlternating, timeOp } from './harness.ts'

Logger.levels.base = 0

const ITERATIONS = 20000

export async function benchPipeline() {
  const add = addTool()
  const args = { a: 1, b: 2 }
  const signal = new AbortController().signal
  const run = { signal } as never

  const plain = new Context()
  plain.plugin(ToolRuntime, { mode: 'native' })
  await plain.start()
  plain.tools.register(add)

  const policed = new Context()
  policed.plugin(ToolRuntime, { mode: 'native' })
  await policed.start()
  policed.tools.register(add)
  policed.on('tools/pre-execute', (exec) => (exec.name === 'add' ? { kind: 'allow' } : undefined))
  policed.tools.guard((exec) => (exec.name === 'rm' ? 'no' : undefined))

  const listened = new Context()
  listened.plugin(ToolRuntime, { mode: 'native' })
  await listened.start()
  listened.tools.register(add)
  listened.tools.listen('tools/pre-execute', (exec) => (exec.name === 'add' ? { kind: 'allow' } : undefined))
  listened.tools.guard((exec) => (exec.name === 'rm' ? 'no' : undefined))

  // an agent's call heard by global and agent-scoped listeners on every pipeline event, some of them another agent's:
  // which listeners apply is decided per event and agent, not per call
  const scoped = new Context()
  scoped.plugin(ToolRuntime, { mode: 'native' })
  await scoped.start()
  scoped.tools.register(add)
  const worker = createAgent(scoped, { name: 'worker' })
  const other = createAgent(scoped, { name: 'other' })
  for (const layer of [scoped, worker.ctx, other.ctx]) {
    layer.tools.listen('tools/pre-execute', () => undefined)
    layer.tools.listen('tools/execute', (_exec, next) => next())
    layer.tools.listen('tools/post-execute', () => undefined)
    layer.tools.listen('tools/result', () => undefined)
  }

  const code = new Context()
  code.plugin(ToolRuntime, { mode: 'code' })
  await code.start()
  code.tools.register(add)

  // the floors cordis 3.18 itself sets: any call through the ctx.tools proxy, and any call of a bound listener
  policed.on('bench/noop' as never, (() => undefined) as never)
  const [bound] = listenersFor(policed, 'bench/noop', undefined)
  const direct = await timeOp(() => add.execute(args, run), ITERATIONS)
  const accessFloor = await timeOp(() => plain.tools, ITERATIONS)
  // the step itself: the listeners of one event that hear the agent (each call takes this for five events)
  const selection = await timeOp(() => listenersFor(scoped, 'tools/pre-execute', worker), ITERATIONS)

  // a figure and what it is compared with (the executor hot callers hold, no proxy per call; a listener's floor) in
  // alternating rounds, so that a burst of load on the machine falls on both sides of a difference
  const tools = plain.tools
  const policedTools = policed.tools
  const listenedHeld = listened.tools
  const codeTools = code.tools
  const [executor, policedExecutor, listenedExecutor, scopedExecutor, codeExecutor] = [tools, policedTools, listenedHeld, scoped.tools, codeTools].map(
    (held) => held.executor,
  )
  const call = () => ({ callId: 'c', name: 'add', arguments: args, signal })
  const [rawNone, none, rawCollapsed, collapsed] = await timeAlternating(
    [() => executor.execute(call()), () => tools.execute(call()), () => codeExecutor.execute(call()), () => codeTools.execute(call())],
    ITERATIONS,
  )
  const [listenerFloor, listenerFloor2, listenerFloor3, rawPolicy, withPolicy, rawListened, heldListened, onAgent] = await timeAlternating(
    [
      () => bound.callback(args),
      () => bound.callback(args, args),
      () => bound.callback(args, args, args),
      () => policedExecutor.execute(call()),
      () => policedTools.execute(call()),
      () => listenedExecutor.execute(call()),
      () => listenedHeld.execute(call()),
      () => scopedExecutor.execute({ ...call(), agent: worker }),
    ],
    ITERATIONS,
  )

  console.log('pipeline: ctx.tools.execute for a trivial tool')
  row('baseline: the tool body called directly', direct, direct)
  // what cordis itself costs any plugin that uses it as shipped: a figure with a ctx.on listener includes one bound
  // listener per listener called, so a target is for the part left when those are taken away
  console.log("cordis 3.18's floors (the framework's cost, not Faber's)")
  row('reading ctx.tools (a proxy cordis builds per read)', accessFloor, direct)
  // its binding traces each argument: a listener of two (post-execute, result) or three (an execute wrapper: the
  // call, next and the signal) costs more
  row('invoking one cordis-bound listener, one argument', listenerFloor, direct)
  row('invoking one cordis-bound listener, two arguments', listenerFloor2, direct)
  row('invoking one cordis-bound listener, three arguments', listenerFloor3, direct)
  console.log("Faber's pipeline, through the executor hot callers hold (no cordis proxy on the path)")
  row('ctx.tools.executor.execute, no listeners', rawNone, direct, '≤ 3 µs')
  row('executor, one pre-execute listener + one guard', rawPolicy, direct)
  faberPart(rawPolicy, listenerFloor, direct, '≤ 5 µs')
  row('executor, one tools.listen listener + one guard', rawListened, direct)
  faberPart(rawListened, listenerFloor, direct, '≤ 5 µs')
  row('executor, a collapsed call (code mode)', rawCollapsed, direct, '≤ 1 µs')
  // the agent's call reaches two of the three layers (global and its own) on each of 4 events: 8 bound listeners, the
  // pre-execute ones of one argument, the execute wrappers of three, the others of two
  row('executor, an agent, 12 tools.listen on 4 events', onAgent, direct)
  faberPart(onAgent, 2 * listenerFloor + 4 * listenerFloor2 + 2 * listenerFloor3, direct)
  row("that agent's listeners of one event (listenersFor)", selection, direct)
  // the same calls through a held ctx.tools: cordis' tracing proxy on the method call is the difference
  console.log("the same through a held ctx.tools (cordis' tracing proxy on each call: the figure less the executor's)")
  const proxied = (label: string, micros: number, executor: number) => {
    row(label, micros, direct)
    row("  of it cordis' proxy (less the executor's figure)", micros - executor, direct)
  }
  proxied('execute, no listeners', none, rawNone)
  proxied('execute, one pre-execute listener + one guard', withPolicy, rawPolicy)
  proxied('execute, one tools.listen listener + one guard', heldListened, rawListened)
  proxied('execute, a collapsed call (code mode)', collapsed, rawCollapsed)
  return {
    directUs: direct,
    accessFloorUs: accessFloor,
    listenerFloorUs: listenerFloor,
    listenerFloorTwoArgumentsUs: listenerFloor2,
    listenerFloorThreeArgumentsUs: listenerFloor3,
    noListenersUs: none,
    listenerAndGuardUs: withPolicy,
    listenedAndGuardUs: heldListened,
    executorNoListenersUs: rawNone,
    executorListenerAndGuardUs: rawPolicy,
    executorListenedAndGuardUs: rawListened,
    executorCollapsedUs: rawCollapsed,
    executorAgentScopedListenersUs: onAgent,
    listenerSelectionUs: selection,
    collapsedUs: collapsed,
  }
}

if (isMain(import.meta.url)) await benchPipeline()
