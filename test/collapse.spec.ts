// the seed's invariant as a matrix: mode source × mode × direct/nested × observer. a collapsed call never reaches
// a body or any policy participant; tools/result observers still see it. native, both and nested calls run.

import { type Agent, CODE_ONLY_SECTION, createAgent, type Mode, type ToolResult } from '@faber/core'
import { callId, deployment, echoTool, signal } from '@faber/core/testing'
import { expect } from 'chai'
import type { Context } from 'cordis'
import { mountCalls } from '../packages/core/tests/helpers.ts'

type Source = 'default' | 'presentAs' | 'inherited'
type Observer = 'none' | 'pre-execute' | 'guard' | 'approval' | 'wrapper' | 'post-execute'

const sources: Source[] = ['default', 'presentAs', 'inherited']
const modes: Mode[] = ['native', 'code', 'both']
const observers: Observer[] = ['none', 'pre-execute', 'guard', 'approval', 'wrapper', 'post-execute']

interface Seen {
  body: number
  observer: number
  results: ToolResult[]
}

function install(ctx: Context, observer: Observer, seen: Seen) {
  ctx.plugin({
    name: `observer-${observer}`,
    inject: ['tools'],
    apply(ctx: Context) {
      const target = (exec: { name: string }) => exec.name === 'write'
      if (observer === 'pre-execute') ctx.on('tools/pre-execute', (exec) => void (target(exec) && seen.observer++))
      if (observer === 'guard') ctx.tools.guard((exec) => void (target(exec) && seen.observer++))
      if (observer === 'approval') {
        ctx.on('tools/pre-execute', (exec) => (target(exec) ? { kind: 'ask', reason: 'writes need approval' } : undefined))
        ctx.set('approval', {
          request: async () => {
            seen.observer++
            return 'allowed'
          },
        })
      }
      if (observer === 'wrapper') {
        ctx.on('tools/execute', (exec, next) => {
          if (target(exec)) seen.observer++
          return next()
        })
      }
      if (observer === 'post-execute') ctx.on('tools/post-execute', (exec) => void (target(exec) && seen.observer++))
      ctx.on('tools/result', (exec, result) => void (target(exec) && seen.results.push(result)))
    },
  })
}

async function scenario(source: Source, mode: Mode, nested: boolean, observer: Observer) {
  const ctx = await deployment({ mode: source === 'default' ? mode : 'native' })
  const seen: Seen = { body: 0, observer: 0, results: [] }
  ctx.tools.register(echoTool('write', { onRun: () => seen.body++ }))
  install(ctx, observer, seen)
  let agent: Agent | undefined
  if (source === 'presentAs') {
    agent = createAgent(ctx, { name: 'worker' })
    agent.ctx.tools.presentAs(mode)
  } else if (source === 'inherited') {
    const preset = createAgent(ctx, { name: 'preset' })
    preset.ctx.tools.presentAs(mode)
    agent = createAgent(ctx, { name: 'worker', parent: preset })
  }
  await ctx.lifecycle.flush()
  expect(ctx.tools.modeFor(agent)).to.equal(mode)
  const args = { text: 'hello' }
  let result: ToolResult
  if (nested) {
    const code = mountCalls(ctx, [{ name: 'write', args }])
    const outer = await ctx.tools.execute({
      callId: callId(),
      name: 'run_code',
      arguments: { code: 'await tools.write({ text: "hello" })', description: 'd' },
      signal: signal(),
      agent,
    })
    if (mode === 'native') {
      // no run_code under native: there is no way to make a nested call at all
      expect(outer.isError && outer.error.code).to.equal('UNKNOWN_TOOL')
      expect(seen.body).to.equal(0)
      return
    }
    expect(outer.isError, outer.content).to.equal(false)
    expect(code.replies[0]).to.deep.equal({ ok: true, value: JSON.stringify({ echoed: 'hello' }) })
    result = seen.results[0]
  } else {
    result = await ctx.tools.execute({ callId: callId(), name: 'write', arguments: args, signal: signal(), agent })
  }
  expect(seen.results).to.have.length(1)
  expect(seen.results[0]).to.equal(result)
  if (mode === 'code' && !nested) {
    expect(result.isError && result.error.code).to.equal('UNKNOWN_TOOL')
    expect(result.content).to.contain('call tools.write(...) inside a run_code program')
    expect(seen.body, 'the body ran').to.equal(0)
    expect(seen.observer, `${observer} observed a collapsed call`).to.equal(0)
    expect(result.trace).to.deep.equal([{ stage: 'create', decision: 'collapsed', by: 'core' }])
  } else {
    expect(result.isError, result.content).to.equal(false)
    expect(seen.body).to.equal(1)
    expect(seen.observer).to.equal(observer === 'none' ? 0 : 1)
  }
}

describe('the collapse matrix', () => {
  for (const source of sources) {
    for (const mode of modes) {
      for (const nested of [false, true]) {
        describe(`${source} ${mode} ${nested ? 'nested' : 'direct'}`, () => {
          for (const observer of observers) {
            it(`observer: ${observer}`, () => scenario(source, mode, nested, observer))
          }
        })
      }
    }
  }
})

describe('the collapse, edges', () => {
  it('a pre-aborted collapsed call ends as ABORTED_BEFORE_DISPATCH, still before policy', async () => {
    const ctx = await deployment({ mode: 'code' })
    let observed = 0
    ctx.tools.register(echoTool('write'))
    ctx.on('tools/pre-execute', () => void observed++)
    const controller = new AbortController()
    controller.abort()
    const result = await ctx.tools.execute({ callId: callId(), name: 'write', arguments: { text: 'x' }, signal: controller.signal })
    expect(result.isError && result.error.code).to.equal('ABORTED_BEFORE_DISPATCH')
    expect(observed).to.equal(0)
  })

  it('a collapsed call with non-JSON arguments is INVALID_ARGUMENTS, not UNKNOWN_TOOL', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register(echoTool('write'))
    const result = await ctx.tools.execute({ callId: callId(), name: 'write', arguments: { text: 1n }, signal: signal() })
    expect(result.isError && result.error.code).to.equal('INVALID_ARGUMENTS')
    expect(result.content).to.contain('$.text is a BigInt')
  })

  it('a name no program could call either gets UNKNOWN_TOOL without a route', async () => {
    const ctx = await deployment({ mode: 'code' })
    const result = await ctx.tools.execute({ callId: callId(), name: 'nope', arguments: {}, signal: signal() })
    expect(result.isError && result.error.code).to.equal('UNKNOWN_TOOL')
    expect(result.content).to.contain('no tool named "nope" is available to programs either')
  })

  it('exotic names get a bracketed route', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register(echoTool('fs-read'))
    const result = await ctx.tools.execute({ callId: callId(), name: 'fs-read', arguments: { text: 'x' }, signal: signal() })
    expect(result.content).to.contain('call tools["fs-read"](...) inside a run_code program')
  })

  it('executionMode is exclusive for a collapsed call even when the tool is concurrency-safe', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register({ ...echoTool('look'), isConcurrencySafe: () => true })
    expect(ctx.tools.executionMode({ name: 'look', arguments: { text: 'x' } })).to.equal('exclusive')
    const agent = createAgent(ctx, { name: 'native' })
    agent.ctx.tools.presentAs('native')
    expect(ctx.tools.executionMode({ name: 'look', arguments: { text: 'x' }, agent })).to.equal('parallel')
  })

  it('wire and the code-only rule agree with execute', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register(echoTool('write'))
    const both = createAgent(ctx, { name: 'both' })
    both.ctx.tools.presentAs('both')
    const code = ctx.tools.wire()
    expect(code.tools.map((t) => t.name)).to.deep.equal(['run_code'])
    expect(code.sections.find((s) => s.id === CODE_ONLY_SECTION)?.text).to.contain('UNKNOWN_TOOL')
    const wire = ctx.tools.wire(both)
    expect(wire.tools.map((t) => t.name)).to.deep.equal(['run_code', 'write'])
    expect(wire.sections.find((s) => s.id === CODE_ONLY_SECTION)?.text).to.equal('')
    const direct = await ctx.tools.execute({ callId: callId(), name: 'write', arguments: { text: 'x' }, signal: signal(), agent: both })
    expect(direct.isError).to.equal(false)
  })
})
