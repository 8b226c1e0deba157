// property: whatever the sequence of registrations, agents, presentAs, restrictions, plugin loads and unloads, a
// model-direct call other than run_code under effective code mode never reaches a body or a pre-execute listener,
// and wire() never advertises a name that execute would reject as unknown.

import { type Agent, createAgent, type Mode } from '@faber/core'
import { callId, deployment, echoTool, signal } from '@faber/core/testing'
import { expect } from 'chai'
import type { Context, ForkScope } from 'cordis'
import fc from 'fast-check'
import { mountCalls } from './helpers.ts'

const TOOL_NAMES = ['read', 'write', 'edit', 'grep'] as const
const MODES: Mode[] = ['native', 'code', 'both']

type Op =
  | { op: 'agent'; parent: number | null }
  | { op: 'register'; at: number | null; name: string }
  | { op: 'presentAs'; at: number; mode: Mode }
  | { op: 'restrict'; at: number; kind: 'allow' | 'deny'; pick: number }
  | { op: 'load'; at: number | null; name: string }
  | { op: 'unload'; index: number }
  | { op: 'call'; at: number | null; name: string; nested: boolean }

const slot = fc.option(fc.nat(5), { nil: null })
const toolName = fc.constantFrom<string>(...TOOL_NAMES, 'run_code', 'missing')

const opArbitrary: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('agent' as const), parent: slot }),
  fc.record({ op: fc.constant('register' as const), at: slot, name: fc.constantFrom(...TOOL_NAMES) }),
  fc.record({ op: fc.constant('presentAs' as const), at: fc.nat(5), mode: fc.constantFrom(...MODES) }),
  fc.record({ op: fc.constant('restrict' as const), at: fc.nat(5), kind: fc.constantFrom('allow' as const, 'deny' as const), pick: fc.nat(15) }),
  fc.record({ op: fc.constant('load' as const), at: slot, name: fc.constantFrom(...TOOL_NAMES) }),
  fc.record({ op: fc.constant('unload' as const), index: fc.nat(5) }),
  { arbitrary: fc.record({ op: fc.constant('call' as const), at: slot, name: toolName, nested: fc.boolean() }), weight: 4 },
)

async function play(defaultMode: Mode, ops: Op[]) {
  const ctx = await deployment({ mode: defaultMode })
  const agents: Agent[] = []
  const forks: ForkScope[] = []
  let bodies = 0
  let listened = 0
  const counted = (name: string) => ({ ...echoTool(name, { onRun: () => bodies++ }) })
  const pick = (at: number | null) => (at === null || agents.length === 0 ? undefined : agents[at % agents.length])
  const layer = (agent: Agent | undefined): Context => agent?.ctx ?? ctx
  const plugins = new Map<string, number>()
  ctx.on('tools/pre-execute', () => void listened++)

  for (const step of ops) {
    const agent = step.op === 'agent' || step.op === 'unload' ? undefined : pick(step.at)
    try {
      switch (step.op) {
        case 'agent':
          agents.push(createAgent(ctx, { name: `agent-${agents.length}`, parent: pick(step.parent) }))
          break
        case 'register':
          layer(agent).tools.register(counted(step.name))
          break
        case 'presentAs':
          if (agent) agent.ctx.tools.presentAs(step.mode)
          break
        case 'restrict': {
          if (!agent) break
          const visible = ctx.tools
            .schemas(agent)
            .map((s) => s.name)
            .filter((n) => n !== 'run_code')
          const chosen = visible.filter((_, i) => (step.pick >> i) & 1)
          if (chosen.length) agent.ctx.tools.restrict(step.kind === 'allow' ? { allow: chosen } : { deny: chosen })
          break
        }
        case 'load': {
          const id = `plugin-${plugins.size}`
          plugins.set(id, 1)
          forks.push(
            layer(agent).plugin({
              name: id,
              inject: ['tools'],
              apply: (plugin: Context) => {
                plugin.tools.register(counted(step.name))
                plugin.on('tools/pre-execute', () => void listened++)
              },
            }),
          )
          await ctx.lifecycle.flush()
          break
        }
        case 'unload':
          if (forks.length) forks.splice(step.index % forks.length, 1)[0].dispose()
          break
        case 'call': {
          const mode = ctx.tools.modeFor(agent)
          const before = { bodies, listened }
          if (step.nested) {
            mountCalls(ctx, [{ name: step.name, args: { text: 'x' } }])
            await ctx.tools.execute({ callId: callId(), name: 'run_code', arguments: { code: 'return 1', description: 'p' }, signal: signal(), agent })
            break
          }
          const args = step.name === 'run_code' ? { code: 'return 1', description: 'p' } : { text: 'x' }
          const result = await ctx.tools.execute({ callId: callId(), name: step.name, arguments: args, signal: signal(), agent })
          if (mode === 'code' && step.name !== 'run_code') {
            // a load whose apply threw (a duplicate tool, say) closes the whole deployment: every call is refused
            const closed = ctx.tools.faults().some((fault) => fault.essential)
            expect(result.isError && result.error.code).to.equal(closed ? 'DEPLOYMENT_FAILED' : 'UNKNOWN_TOOL')
            expect(bodies, 'a collapsed call reached a body').to.equal(before.bodies)
            expect(listened, 'a collapsed call reached a pre-execute listener').to.equal(before.listened)
          }
          break
        }
      }
    } catch (error) {
      // refused registrations (duplicates, unknown restrictions) are part of the space explored
      if (!(error instanceof TypeError)) throw error
    }
    for (const a of [undefined, ...agents.filter((x) => !x.disposed)]) {
      for (const shown of ctx.tools.wire(a).tools) {
        expect(ctx.tools.get(shown.name, a), `wire shows ${shown.name} that ${a ?? 'global'} cannot resolve`).not.to.equal(undefined)
        if (shown.name !== 'run_code') expect(ctx.tools.modeFor(a)).not.to.equal('code')
      }
    }
  }
  // and every advertised name is accepted by execute (not unknown) for every agent
  for (const a of [undefined, ...agents]) {
    for (const shown of ctx.tools.wire(a).tools) {
      const args = shown.name === 'run_code' ? { code: 'return 1', description: 'p' } : { text: 'x' }
      const result = await ctx.tools.execute({ callId: callId(), name: shown.name, arguments: args, signal: signal(), agent: a })
      expect(result.isError && result.error.code).not.to.equal('UNKNOWN_TOOL')
    }
  }
  await ctx.stop()
}

describe('the collapse, property-based', () => {
  it('holds for random deployments and call sequences', async function () {
    // 150 deployments: seconds on an idle machine, longer on a shared one; the mocha default is for single cases
    this.timeout(120_000)
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...MODES), fc.array(opArbitrary, { minLength: 1, maxLength: 40 }), (mode, ops) => play(mode, ops)),
      { numRuns: 150 },
    )
  })
})
