// what the inspector costs: per call (its pre-execute and result observers), against the same calls without it in the
// same process; and building a report / one cordis_inspect section for a deployment of many agents and tools.

import ToolRuntime, { createAgent } from '@faber/core'
import Inspector from '@faber/plugin-tool-cordis'
import { Context, Logger } from 'cordis'
import { addTool, isMain, row, timeOp } from './harness.ts'

Logger.levels.base = 0

const ITERATIONS = 20000
const AGENTS = 20
const TOOLS = 50

function tool(name: string) {
  return addTool(name, { description: `adds two numbers (${name})` })
}

async function deployment(inspector: boolean) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  if (inspector) ctx.plugin(Inspector, { maxCalls: 50 })
  await ctx.start()
  for (let i = 0; i < TOOLS; i++) ctx.tools.register(tool(i ? `add_${i}` : 'add'))
  ctx.plugin({
    name: 'team',
    inject: ['tools'],
    apply(c: Context) {
      let parent: ReturnType<typeof createAgent> | undefined
      for (let i = 0; i < AGENTS; i++) {
        const agent = createAgent(c, { name: `agent-${i}`, parent: i % 4 ? parent : undefined })
        if (i % 4 === 0) agent.ctx.tools.presentAs(i % 8 ? 'both' : 'code')
        agent.ctx.tools.register(tool(`own_${i}`))
        parent = agent
      }
    },
  })
  await ctx.lifecycle.flush()
  return ctx
}

export async function benchInspector() {
  const args = { a: 1, b: 2 }
  const signal = new AbortController().signal
  const plain = await deployment(false)
  const inspected = await deployment(true)
  // agent-5 sits under agent-4, which presents as `both`: direct calls run (under `code` they would collapse)
  const plainAgent = plain.tools.agent('agent-5')!
  const inspectedAgent = inspected.tools.agent('agent-5')!
  for (const [ctx, agent] of [
    [plain, plainAgent],
    [inspected, inspectedAgent],
  ] as const) {
    const probe = await ctx.tools.execute({ callId: 'probe', name: 'add', arguments: args, signal, agent })
    if (probe.isError) throw new Error(`bench setup: ${probe.content}`)
  }

  // interleaved, best of three each: the machine is shared and noisy
  const plainTools = plain.tools
  const inspectedTools = inspected.tools
  let without = Number.POSITIVE_INFINITY
  let withIt = Number.POSITIVE_INFINITY
  for (let i = 0; i < 3; i++) {
    without = Math.min(without, await timeOp(() => plainTools.execute({ callId: 'c', name: 'add', arguments: args, signal, agent: plainAgent }), ITERATIONS))
    withIt = Math.min(
      withIt,
      await timeOp(() => inspectedTools.execute({ callId: 'c', name: 'add', arguments: args, signal, agent: inspectedAgent }), ITERATIONS),
    )
  }
  // fill every ring so the report carries a full trace
  for (const agent of inspected.tools.agents()) {
    for (let i = 0; i < 50; i++) await inspected.tools.execute({ callId: `f${i}`, name: 'add', arguments: args, signal, agent })
  }
  const inspector = inspected.inspector
  const report = await timeOp(() => inspector.report(), 200)
  const probe = await inspected.tools.execute({ callId: 'probe', name: 'cordis_inspect', arguments: { what: 'tools' }, signal, agent: inspectedAgent })
  if (probe.isError) throw new Error(`bench setup: ${probe.content}`)
  const section = await timeOp(
    () => inspectedTools.execute({ callId: 'i', name: 'cordis_inspect', arguments: { what: 'tools' }, signal, agent: inspectedAgent }),
    200,
  )

  console.log(`inspector: ${AGENTS} agents, ${TOOLS} global tools, rings of 50 calls`)
  row('baseline: execute without the inspector', without, without)
  row('execute with the inspector tracing', withIt, without)
  row('inspector.report() (whole report)', report, without)
  row('cordis_inspect { what: tools } (one agent)', section, without)
  return { withoutUs: without, withUs: withIt, overheadRatio: withIt / without, reportUs: report, inspectToolUs: section }
}

if (isMain(import.meta.url)) await benchInspector()
