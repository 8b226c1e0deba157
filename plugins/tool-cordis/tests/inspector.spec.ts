import { type Agent, assertStarted, CODE_ONLY_SECTION, createAgent, SDK_SECTION, type ToolResult } from '@faber/core'
import { echoTool, failingTool, signal } from '@faber/core/testing'
import WorkerSandbox from '@faber/sandbox'
import { expect } from 'chai'
import { Context } from 'cordis'
import Inspector, { COLLAPSED_NOTE, inspect, type PluginReport, type Report, renderReport } from '../src/index.ts'
import { deployment, ScriptedCodeRuntime } from './helpers.ts'

function findPlugin(node: PluginReport, name: string): PluginReport | undefined {
  if (node.name === name) return node
  for (const child of node.children) {
    const found = findPlugin(child, name)
    if (found) return found
  }
}

const layer = (report: Report, agent: string | null) => report.tools.find((l) => l.agent === agent)!
const listenersOf = (report: Report, event: string) => report.events.find((e) => e.event === event)?.listeners ?? []

/** a small team: a preset in code mode with a mask, a coder under it with its own tool and listener, a native reviewer */
const team = {
  name: 'team',
  inject: ['tools'],
  apply(ctx: Context) {
    const preset = createAgent(ctx, { name: 'preset' })
    preset.ctx.tools.presentAs('code')
    preset.ctx.tools.restrict({ deny: ['explode'] })
    const coder = createAgent(ctx, { name: 'coder', parent: preset })
    coder.ctx.plugin({
      name: 'coder-kit',
      reusable: true,
      apply(c: Context) {
        c.tools.register(echoTool('echo'))
        c.on('tools/post-execute', () => undefined)
      },
    })
    const reviewer = createAgent(ctx, { name: 'reviewer' })
    reviewer.ctx.tools.presentAs('native')
  },
}

const globalTools = {
  name: 'global-tools',
  inject: ['tools'],
  apply(ctx: Context) {
    ctx.tools.register(echoTool('echo'))
    ctx.tools.register(failingTool('explode'))
  },
}

/** denies `explode`, asks about `ask_me`, abstains otherwise */
const policy = {
  name: 'policy',
  apply(ctx: Context) {
    ctx.on('tools/pre-execute', (exec) => {
      if (exec.name === 'explode') return { kind: 'deny', reason: 'no explosions' }
      if (exec.name === 'ask_me') return { kind: 'ask', reason: 'sensitive' }
    })
  },
}

const approver = (answer: 'allowed' | 'rejected') => ({
  name: 'approver',
  apply: (ctx: Context) => ctx.set('approval', { request: async () => answer }),
})

async function teamDeployment(inspector: Partial<Inspector.Config> | false = {}) {
  const ctx = await deployment({ inspector })
  ctx.plugin(globalTools)
  ctx.plugin(policy)
  ctx.plugin(team)
  await assertStarted(ctx)
  return ctx
}

const agent = (ctx: Context, name: string) => ctx.tools.agent(name) as Agent
const call = (ctx: Context, callId: string, name: string, args: unknown, on?: Agent) =>
  ctx.tools.execute({ callId, name, arguments: args, signal: signal(), agent: on })

describe('report: what is loaded', () => {
  it('shows the plugin tree, services, listeners and agents of the live deployment', async () => {
    const ctx = await teamDeployment()
    const report = ctx.inspector.report()
    const teamNode = findPlugin(report.plugins, 'team')!
    expect(teamNode.state).to.equal('active')
    expect(findPlugin(teamNode, 'coder-kit')).to.include({ state: 'active', agent: 'coder', reusable: true })
    for (const name of ['tools', 'inspector', 'global-tools', 'policy']) expect(findPlugin(report.plugins, name)?.state, name).to.equal('active')

    const services = Object.fromEntries(report.services.map((s) => [s.name, s.provider]))
    expect(services).to.include({ tools: 'tools', inspector: 'inspector' })

    expect(listenersOf(report, 'tools/pre-execute')).to.deep.equal([{ plugin: 'inspector', prepend: true }, { plugin: 'policy' }])
    expect(listenersOf(report, 'tools/post-execute')).to.deep.equal([{ plugin: 'coder-kit', agent: 'coder' }])
    expect(report.agents).to.deep.equal([
      { name: 'preset', parent: null, chain: ['preset'], createdBy: 'team', listeners: [] },
      {
        name: 'coder',
        parent: 'preset',
        chain: ['coder', 'preset'],
        createdBy: 'team',
        listeners: [{ event: 'tools/post-execute', listeners: [{ plugin: 'coder-kit', agent: 'coder' }] }],
      },
      { name: 'reviewer', parent: null, chain: ['reviewer'], createdBy: 'team', listeners: [] },
    ])
  })

  it('shows per agent the visible set, the wire set, the mode and where it came from, collapse, masks and shadows', async () => {
    const ctx = await teamDeployment()
    const report = ctx.inspector.report()
    const global = layer(report, null)
    expect(global).to.include({ mode: 'native', modeFrom: 'default' })
    expect(global.visible.map((t) => t.name)).to.deep.equal(['cordis_inspect', 'echo', 'explode'])
    expect(global.wire).to.deep.equal(['cordis_inspect', 'echo', 'explode'])
    expect(global.collapsed).to.deep.equal([])

    const preset = layer(report, 'preset')
    expect(preset).to.include({ mode: 'code', modeFrom: 'self' })
    expect(preset.wire).to.deep.equal(['run_code'])
    expect(preset.collapsed).to.deep.equal(['cordis_inspect', 'echo'])
    expect(preset.masked).to.deep.equal([{ name: 'explode', by: 'preset' }])
    expect(preset.sections).to.deep.equal([CODE_ONLY_SECTION, SDK_SECTION])

    const coder = layer(report, 'coder')
    expect(coder).to.include({ mode: 'code', modeFrom: 'ancestor', modeAgent: 'preset' })
    expect(coder.visible).to.deep.include({ name: 'echo', owner: 'coder', plugin: 'coder-kit' })
    expect(global.visible).to.deep.include({ name: 'cordis_inspect', owner: 'global', plugin: 'inspector' })
    expect(coder.shadows).to.deep.equal([{ name: 'echo', by: 'coder', hidden: 'global' }])
    expect(coder.masks).to.deep.equal([{ agent: 'preset', deny: ['explode'], plugin: 'team' }])

    expect(layer(report, 'reviewer')).to.include({ mode: 'native', modeFrom: 'self' })
    // the views come from the core's own answers
    for (const l of report.tools) {
      const a = l.agent === null ? undefined : agent(ctx, l.agent)
      expect(l.wire).to.deep.equal(ctx.tools.wire(a).tools.map((t) => t.name))
      expect(l.collapsed).to.deep.equal(ctx.tools.collapsedNames(a))
    }
  })

  it('shows a failed plugin with its error', async () => {
    const ctx = await teamDeployment()
    ctx.plugin({
      name: 'fragile',
      apply() {
        throw new Error('missing credentials file')
      },
    })
    await ctx.lifecycle.flush()
    expect(findPlugin(ctx.inspector.report().plugins, 'fragile')).to.include({ state: 'failed', error: 'missing credentials file' })
    expect(ctx.inspector.select('plugins', 'fragile').text).to.contain('fragile [FAILED: missing credentials file]')
  })

  it('removes the tools, listeners and services of a disposed plugin, and lists the disposal', async () => {
    const ctx = await teamDeployment()
    const fork = ctx.plugin({
      name: 'extra',
      inject: ['tools'],
      apply(c: Context) {
        c.tools.register(echoTool('extra_echo'))
        c.on('tools/result', () => {})
        c.set('extraService', { ok: true })
      },
    })
    await assertStarted(ctx)
    let report = ctx.inspector.report()
    expect(layer(report, null).visible.map((t) => t.name)).to.include('extra_echo')
    expect(listenersOf(report, 'tools/result').map((l) => l.plugin)).to.include('extra')
    expect(report.services.map((s) => s.provider)).to.include('extra')

    fork.dispose()
    report = ctx.inspector.report()
    expect(findPlugin(report.plugins, 'extra')).to.equal(undefined)
    for (const l of report.tools) expect(l.visible.map((t) => t.name)).to.not.include('extra_echo')
    expect(report.events.flatMap((e) => e.listeners.map((l) => l.plugin))).to.not.include('extra')
    expect(report.services.map((s) => s.provider)).to.not.include('extra')
    expect(report.disposed.map((d) => d.name)).to.include('extra')
  })

  it('drops a disposed agent with the plugin that created it', async () => {
    const ctx = await teamDeployment()
    await call(ctx, 'r1', 'echo', { text: 'hi' }, agent(ctx, 'reviewer'))
    const teamFork = [...ctx.registry.values()].find((r) => r.name === 'team')!.children[0]
    teamFork.dispose()
    const report = ctx.inspector.report()
    expect(report.agents).to.deep.equal([])
    expect(report.tools.map((l) => l.agent)).to.deep.equal([null])
    expect(report.calls).to.deep.equal([])
  })

  it('is JSON, and inspect() gives the same report', async () => {
    const ctx = await teamDeployment()
    await call(ctx, 'j1', 'explode', {})
    const report = inspect(ctx)
    expect(JSON.parse(JSON.stringify(report))).to.deep.equal(report)
    expect(report.tracing).to.equal(true)
    expect(report.calls.map((c) => c.callId)).to.deep.equal(['j1'])
  })

  it('inspect() says what is missing without a ToolRuntime', () => {
    expect(() => inspect(new Context())).to.throw(TypeError, /no ToolRuntime is mounted/)
  })

  it('without the inspector, inspect() still reports the deployment, with no trace', async () => {
    const ctx = await teamDeployment(false)
    const report = inspect(ctx)
    expect(report.tracing).to.equal(false)
    expect(report.agents.map((a) => a.name)).to.deep.equal(['preset', 'coder', 'reviewer'])
    expect(layer(report, null).visible.map((t) => t.name)).to.deep.equal(['echo', 'explode'])
    expect(renderReport(report)).to.contain('no call trace: the inspector plugin is not loaded')
  })
})

describe('call trace', () => {
  it('marks a collapsed call as rejected by the core before policy', async () => {
    const ctx = await teamDeployment()
    let policySaw = 0
    ctx.on('tools/pre-execute', () => {
      policySaw++
    })
    const result = await call(ctx, 'k1', 'echo', { text: 'x' }, agent(ctx, 'coder'))
    expect(result.isError && result.error.code).to.equal('UNKNOWN_TOOL')
    const [record] = ctx.inspector.report().calls
    expect(record).to.deep.include({ callId: 'k1', agent: 'coder', reachedPolicy: false, note: COLLAPSED_NOTE, durationMs: 0, nested: false })
    expect(record.stages).to.deep.equal([{ stage: 'create', decision: 'collapsed', by: 'core' }])
    expect(policySaw).to.equal(0)
    expect(ctx.inspector.select('calls', 'coder').text).to.contain('no policy saw it')
  })

  it('records a denial with the stage and the plugin that denied', async () => {
    const ctx = await teamDeployment()
    ctx.plugin({
      name: 'fence',
      inject: ['tools'],
      apply: (c: Context) => c.tools.guard((exec) => ((exec.arguments as any).text === 'no' ? 'fenced' : undefined)),
    })
    await assertStarted(ctx)
    await call(ctx, 'd1', 'explode', {})
    await call(ctx, 'd2', 'echo', { text: 'no' })
    const [listener, guard] = ctx.inspector.report().calls
    expect(listener).to.deep.include({ reachedPolicy: true, outcome: 'error' })
    expect(listener.error).to.deep.include({ code: 'DENIED', deniedBy: { stage: 'pre-execute', plugin: 'policy' } })
    expect(listener.stages).to.deep.equal([{ stage: 'pre-execute', decision: 'deny', by: 'policy', reason: 'no explosions' }])
    expect(guard.error!.deniedBy).to.deep.equal({ stage: 'guard', plugin: 'fence' })
    expect(guard.stages).to.deep.equal([{ stage: 'guard', decision: 'deny', by: 'fence', reason: 'fenced' }])
    expect(ctx.inspector.select('calls', 'explode').text).to.contain('DENIED by pre-execute/policy')
  })

  it('records an ask and the approval outcome', async () => {
    const ctx = await teamDeployment()
    ctx.tools.register(echoTool('ask_me'))
    ctx.plugin(approver('allowed'))
    await assertStarted(ctx)
    const result = await call(ctx, 'a1', 'ask_me', { text: 'please' })
    expect(result.isError).to.equal(false)
    const [record] = ctx.inspector.report().calls
    expect(record.outcome).to.equal('ok')
    expect(record.stages).to.deep.equal([
      { stage: 'pre-execute', decision: 'ask', by: 'policy', reason: 'sensitive' },
      { stage: 'approval', decision: 'allowed', by: 'approval' },
    ])
  })

  it('records nested calls with their outer call, and the run_code call around them', async () => {
    const ctx = await teamDeployment()
    ctx.set(
      'codeRuntime',
      new ScriptedCodeRuntime([
        { name: 'echo', args: { text: 'inside' } },
        { name: 'explode', args: {} },
        { name: 'cordis_inspect', args: { what: 'calls' } },
      ]),
    )
    const coder = agent(ctx, 'coder')
    // explode is masked for coder: the nested call is unknown to it, which ends in the core at create
    const result = await call(ctx, 'run-1', 'run_code', { code: 'return 1', description: 'demo' }, coder)
    expect(result.isError).to.equal(false)
    const calls = ctx.inspector.report().calls
    expect(calls.map((c) => [c.name, c.callId, c.nested, c.outerCallId ?? null, c.rootCallId])).to.deep.equal([
      ['echo', 'run-1/1', true, 'run-1', 'run-1'],
      ['explode', 'run-1/2', true, 'run-1', 'run-1'],
      ['cordis_inspect', 'run-1/3', true, 'run-1', 'run-1'],
      ['run_code', 'run-1', false, null, 'run-1'],
    ])
    expect(calls[0]).to.deep.include({ reachedPolicy: true, outcome: 'ok' })
    expect(calls[1]).to.deep.include({ reachedPolicy: false, outcome: 'error' })
    expect(calls[1].stages).to.deep.equal([{ stage: 'create', decision: 'unknown', by: 'core' }])
    const text = ctx.inspector.select('calls', 'run-1').text
    expect(text).to.contain('↳ in run-1: echo [run-1/1] ok')
    expect(text).to.contain('run_code [run-1] ok')
  })

  it('measures from pre-execute to the result, with an injected clock', async () => {
    let now = 1000
    const clock = { now: () => now, wall: () => 1_700_000_000_000 + now }
    const ctx = await teamDeployment({ clock })
    ctx.tools.register({
      ...echoTool('slow'),
      execute: ({ text }: { text: string }) => {
        now += 25
        return { echoed: text }
      },
    })
    await call(ctx, 's1', 'slow', { text: 'x' })
    await call(ctx, 's2', 'echo', { text: 'x' }, agent(ctx, 'coder'))
    const [slow, collapsed] = ctx.inspector.report().calls
    expect(slow).to.deep.include({ durationMs: 25, startedAt: 1_700_000_001_000 })
    expect(collapsed).to.deep.include({ durationMs: 0, startedAt: 1_700_000_001_025 })
  })

  it('keeps a bounded ring per agent', async () => {
    const ctx = await teamDeployment({ maxCalls: 3 })
    const reviewer = agent(ctx, 'reviewer')
    for (let i = 1; i <= 5; i++) await call(ctx, `r${i}`, 'echo', { text: `${i}` }, reviewer)
    for (let i = 1; i <= 2; i++) await call(ctx, `g${i}`, 'echo', { text: `${i}` })
    const calls = ctx.inspector.report().calls
    expect(calls.filter((c) => c.agent === 'reviewer').map((c) => c.callId)).to.deep.equal(['r3', 'r4', 'r5'])
    expect(calls.filter((c) => c.agent === null).map((c) => c.callId)).to.deep.equal(['g1', 'g2'])
    for (let i = 3; i <= 9; i++) {
      await call(ctx, `g${i}`, 'echo', { text: `${i}` })
      const kept = ctx.inspector
        .report()
        .calls.filter((c) => c.agent === null)
        .map((c) => c.callId)
      expect(kept).to.deep.equal([`g${i - 2}`, `g${i - 1}`, `g${i}`])
    }
  })
})

describe('observing only', () => {
  /** the same calls, with or without the inspector: every result and every side effect must match */
  async function scenario(withInspector: boolean) {
    const ctx = await teamDeployment(withInspector ? {} : false)
    const bodies: string[] = []
    ctx.plugin({
      name: 'recorder',
      inject: ['tools'],
      apply(c: Context) {
        c.tools.register({
          ...echoTool('ask_me'),
          execute: ({ text }: { text: string }) => {
            bodies.push(text)
            return { echoed: text }
          },
        })
        c.tools.guard((exec) => (exec.name === 'echo' && (exec.arguments as any).text === 'blocked' ? 'blocked by guard' : undefined))
      },
    })
    let answer: 'allowed' | 'rejected' = 'allowed'
    ctx.set('approval', { request: async () => answer })
    ctx.set(
      'codeRuntime',
      new ScriptedCodeRuntime([
        { name: 'echo', args: { text: 'nested' } },
        { name: 'ask_me', args: { text: 'nested ask' } },
      ]),
    )
    await assertStarted(ctx)
    const coder = agent(ctx, 'coder')
    const reviewer = agent(ctx, 'reviewer')
    const results: ToolResult[] = []
    results.push(await call(ctx, 'o1', 'echo', { text: 'plain' }))
    results.push(await call(ctx, 'o2', 'explode', {}))
    results.push(await call(ctx, 'o3', 'echo', { text: 'blocked' }))
    results.push(await call(ctx, 'o4', 'ask_me', { text: 'yes' }, reviewer))
    answer = 'rejected'
    results.push(await call(ctx, 'o5', 'ask_me', { text: 'no' }, reviewer))
    answer = 'allowed'
    results.push(await call(ctx, 'o6', 'echo', { text: 'collapsed' }, coder))
    results.push(await call(ctx, 'o7', 'echo', { text: 42 }))
    results.push(await call(ctx, 'o8', 'run_code', { code: 'return 1', description: 'nested calls' }, coder))
    const controller = new AbortController()
    controller.abort()
    results.push(await ctx.tools.execute({ callId: 'o9', name: 'echo', arguments: { text: 'late' }, signal: controller.signal }))
    return { results, bodies }
  }

  it('changes no call outcome', async () => {
    const without = await scenario(false)
    const withIt = await scenario(true)
    expect(withIt.results).to.deep.equal(without.results)
    expect(withIt.bodies).to.deep.equal(without.bodies)
    // the scenario covers every path the trace distinguishes
    const codes = without.results.map((r) => (r.isError ? r.error.code : 'ok'))
    expect(codes).to.deep.equal(['ok', 'DENIED', 'DENIED', 'ok', 'DENIED', 'UNKNOWN_TOOL', 'INVALID_ARGUMENTS', 'ok', 'ABORTED_BEFORE_DISPATCH'])
  })
})

describe('the cordis_inspect tool', () => {
  it('answers an agent with its own view, read-only and concurrency-safe', async () => {
    const ctx = await teamDeployment()
    const reviewer = agent(ctx, 'reviewer')
    expect(ctx.tools.get('cordis_inspect', reviewer)?.annotations).to.deep.equal({ readOnly: true })
    expect(ctx.tools.executionMode({ name: 'cordis_inspect', arguments: { what: 'tools' }, agent: reviewer })).to.equal('parallel')
    const result = await call(ctx, 't1', 'cordis_inspect', { what: 'tools' }, reviewer)
    expect(result.isError).to.equal(false)
    expect(result.content).to.contain("agent reviewer: mode native (this agent's presentAs)")
    expect(result.content).to.not.contain('agent coder')
    const byName = await call(ctx, 't2', 'cordis_inspect', { what: 'tools', name: 'coder' }, reviewer)
    expect(byName.content).to.contain("agent coder: mode code (inherited from preset's presentAs)")
    expect(byName.content).to.contain('collapsed for direct calls (reach them inside run_code): cordis_inspect, echo')
  })

  it("an agent's listeners are the ones core hands its calls: its own and its ancestors', not a sibling's, until unloaded", async () => {
    const ctx = await teamDeployment()
    const fork = agent(ctx, 'preset').ctx.plugin({ name: 'preset-kit', reusable: true, apply: (c: Context) => void c.on('tools/result', () => undefined) })
    await assertStarted(ctx)
    const scoped = (name: string) => ctx.inspector.report().agents.find((a) => a.name === name)!.listeners
    expect(scoped('coder')).to.deep.equal([
      { event: 'tools/post-execute', listeners: [{ plugin: 'coder-kit', agent: 'coder' }] },
      { event: 'tools/result', listeners: [{ plugin: 'preset-kit', agent: 'preset' }] },
    ])
    expect(scoped('reviewer')).to.deep.equal([])
    fork.dispose()
    expect(scoped('coder').map((e) => e.event)).to.deep.equal(['tools/post-execute'])
  })

  it('covers every section, and narrows by name', async () => {
    const ctx = await teamDeployment()
    await call(ctx, 'n1', 'explode', {})
    const text = async (what: string, name?: string) => (await call(ctx, `q-${what}-${name}`, 'cordis_inspect', name ? { what, name } : { what })).content
    expect(await text('plugins', 'coder')).to.contain('- coder-kit [active] on agent coder')
    expect(await text('services', 'tools')).to.contain('tools ← tools')
    expect(await text('events', 'pre-execute')).to.contain('- tools/pre-execute: inspector (first), policy')
    expect(await text('calls')).to.contain('#1 explode [n1] DENIED by pre-execute/policy')
    expect(await text('agent', 'coder')).to.contain('post-execute: coder-kit@coder')
    expect(await text('tools', 'explode')).to.contain('- preset: masked (by preset)')
    expect(await text('agent', 'nobody')).to.contain('no agent named "nobody"')
  })

  it('caps the text it returns', async () => {
    const ctx = await teamDeployment({ maxChars: 300 })
    for (let i = 0; i < 40; i++) ctx.tools.register(echoTool(`tool_with_a_long_name_${i}`))
    const result = await call(ctx, 'cap', 'cordis_inspect', { what: 'tools' })
    expect(result.content.length).to.be.at.most(300)
    expect(result.content).to.match(/cut at 300 characters of \d+; narrow with "name"$/)
    expect((result as any).value.data[0].visible).to.have.length(43)
  })

  it('rejects an unknown section before it runs', async () => {
    const ctx = await teamDeployment()
    const result = await call(ctx, 'bad', 'cordis_inspect', { what: 'secrets' })
    expect(result.isError && result.error.code).to.equal('INVALID_ARGUMENTS')
  })

  it('is reached through run_code under code mode, like any tool', async () => {
    const ctx = await teamDeployment()
    const coder = agent(ctx, 'coder')
    const direct = await call(ctx, 'c1', 'cordis_inspect', { what: 'agent' }, coder)
    expect(direct.isError && direct.error.code).to.equal('UNKNOWN_TOOL')
    ctx.set('codeRuntime', new ScriptedCodeRuntime([{ name: 'cordis_inspect', args: { what: 'agent' } }]))
    const viaCode = await call(ctx, 'c2', 'run_code', { code: 'return await tools.cordis_inspect({ what: "agent" })', description: 'inspect' }, coder)
    expect(viaCode.isError).to.equal(false)
    const [reply] = (viaCode as any).value.result
    expect(reply.ok).to.equal(true)
    expect(JSON.parse(reply.value).text).to.contain('agent coder (chain coder → preset), created by team')
  })
})

describe('call trace with the real sandbox', () => {
  it('shows the code runtime with the programs running under its cap and the queue behind it', async () => {
    const ctx = await teamDeployment()
    ctx.plugin(WorkerSandbox, { poolSize: 1, maxConcurrent: 3 })
    await assertStarted(ctx)
    try {
      const program = 'return (await tools.cordis_inspect({ what: "services", name: "codeRuntime" })).text'
      const result = await call(ctx, 'look', 'run_code', { code: program, description: 'look at the sandbox' }, agent(ctx, 'coder'))
      expect(result.isError, result.content).to.equal(false)
      expect((result as any).value.result).to.match(
        /codeRuntime ← .*\[worker-vm: 1\/3 running \(0\/64 of them waiting on a person\), 0 queued, 0 checkpointed\]/,
      )
      const service = ctx.inspector.report().services.find((s) => s.name === 'codeRuntime')
      expect(service?.load).to.include({ backend: 'worker-vm', running: 0, queued: 0, maxConcurrent: 3, peakRunning: 1 })
    } finally {
      await ctx.stop()
    }
  })

  it('links the calls a program makes to its run_code call', async () => {
    const ctx = await teamDeployment()
    ctx.plugin(WorkerSandbox, { poolSize: 1 })
    await assertStarted(ctx)
    try {
      const coder = agent(ctx, 'coder')
      const program = [
        "const [a, b] = await Promise.all([tools.echo({ text: 'a' }), tools.echo({ text: 'b' })])",
        'const seen = await tools.cordis_inspect({ what: "calls" })',
        'return [a.echoed, b.echoed, seen.data.length]',
      ].join('\n')
      const result = await call(ctx, 'prog', 'run_code', { code: program, description: 'two echoes and a look' }, coder)
      expect(result.isError, result.content).to.equal(false)
      // when the program looked, its two echoes had already ended and were in the ring
      expect((result as any).value.result).to.deep.equal(['a', 'b', 2])
      const calls = ctx.inspector.report().calls
      expect(calls.map((c) => c.name)).to.deep.equal(['echo', 'echo', 'cordis_inspect', 'run_code'])
      for (const nested of calls.slice(0, 3))
        expect(nested).to.deep.include({ nested: true, outerCallId: 'prog', rootCallId: 'prog', agent: 'coder', reachedPolicy: true })
      expect(calls[3]).to.deep.include({ nested: false, rootCallId: 'prog', outcome: 'ok' })
    } finally {
      await ctx.stop()
    }
  })
})
