import { AgentSession, type Message, type ModelRequest, ScriptedModel, type SessionEvent } from '@faber/agent'
import { CODE_ONLY_SECTION, createAgent, defineTool, SDK_SECTION, t } from '@faber/core'
import { deferred, deployment } from '@faber/core/testing'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'
import { tick } from './helpers.ts'

function addTool(ctx: Context) {
  return ctx.tools.register(
    defineTool({
      name: 'add',
      description: 'add two numbers',
      parameters: t.object({ a: t.number(), b: t.number() }),
      output: { schema: t.number() },
      execute: ({ a, b }) => a + b,
      isConcurrencySafe: () => true,
    }),
  )
}

/** `slow` (parallel) and `write` (exclusive): each call waits for its gate and records start and end */
function gatedTools(ctx: Context) {
  const events: string[] = []
  const gates = new Map<string, ReturnType<typeof deferred<void>>>()
  const gate = (key: string) => {
    let g = gates.get(key)
    if (!g) gates.set(key, (g = deferred()))
    return g
  }
  let running = 0
  let peak = 0
  const body = async (key: string, signal: AbortSignal) => {
    running++
    peak = Math.max(peak, running)
    events.push(`start ${key}`)
    const aborted = new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }))
    await Promise.race([gate(key).promise, aborted])
    running--
    events.push(`end ${key}`)
    return key
  }
  ctx.tools.register(
    defineTool({
      name: 'slow',
      description: 'waits for its gate',
      parameters: t.object({ key: t.string() }),
      output: { schema: t.string() },
      execute: ({ key }, run) => body(key, run.signal),
      isConcurrencySafe: () => true,
    }),
  )
  ctx.tools.register(
    defineTool({
      name: 'write',
      description: 'waits for its gate, alone',
      parameters: t.object({ key: t.string() }),
      output: { schema: t.string() },
      execute: ({ key }, run) => body(key, run.signal),
    }),
  )
  return { events, open: (key: string) => gate(key).resolve(), peak: () => peak }
}

const call = (name: string, args: unknown) => ({ name, arguments: args })

describe('AgentSession: the loop', () => {
  it('runs tool calls and stops when the model answers without calls', async () => {
    const ctx = await deployment()
    addTool(ctx)
    const model = new ScriptedModel([{ toolCalls: [call('add', { a: 1, b: 2 })] }, ({ results }) => ({ text: `the sum is ${results[0].content}` })])
    const session = new AgentSession(ctx, { model })
    const outcome = await session.send('add 1 and 2')
    expect(outcome).to.include({ reason: 'done', text: 'the sum is 3', steps: 2, turn: 1 })
    expect(session.messages.map((m) => m.role)).to.deep.equal(['user', 'assistant', 'tool', 'assistant'])
    expect(outcome.usage?.totalTokens).to.be.greaterThan(0)
  })

  it('shows the model wire(agent): under code mode only run_code', async () => {
    const ctx = await deployment({ mode: 'code' })
    addTool(ctx)
    const seen: string[][] = []
    const model = new ScriptedModel([
      ({ tools }) => {
        seen.push(tools.map((tool) => tool.name))
        return { text: 'ok' }
      },
    ])
    await new AgentSession(ctx, { model }).send('hi')
    expect(seen).to.deep.equal([['run_code']])
  })

  it('assembles ordered sections: persona, the code-only rule, guidance, the SDK, runtime context', async () => {
    const ctx = await deployment({ mode: 'code' })
    addTool(ctx)
    const main = createAgent(ctx, { name: 'main' })
    const other = createAgent(ctx, { name: 'other' })
    ctx.on('prompt/sections', ({ visible }) =>
      visible.some((tool) => tool.name === 'add') ? { id: 'tool:add', order: 150, text: 'GUIDANCE: add adds numbers.' } : undefined,
    )
    other.ctx.on('prompt/sections', () => ({ id: 'other-only', order: 120, text: 'OTHER ONLY' }))
    let system = ''
    const model = new ScriptedModel([
      ({ messages }) => {
        system = messages[0].content
        return { text: 'ok' }
      },
    ])
    const session = new AgentSession(ctx, { model, agent: main, persona: 'PERSONA: you are careful.', context: 'RUNTIME: workspace /tmp/x' })
    await session.send('hi')
    const order = ['PERSONA', 'How to call tools here', 'GUIDANCE', 'The tools SDK', 'RUNTIME'].map((marker) => system.indexOf(marker))
    expect(order.every((index) => index >= 0)).to.equal(true, system)
    expect([...order].sort((a, b) => a - b)).to.deep.equal(order)
    expect(system).not.to.include('OTHER ONLY')
    expect(session.prompt().sections.map((s) => s.id)).to.deep.equal(['persona', CODE_ONLY_SECTION, 'tool:add', SDK_SECTION, 'runtime'])
  })

  it('emits agent/turn at the start of each user turn', async () => {
    const ctx = await deployment()
    const agent = createAgent(ctx, { name: 'main' })
    const turns: { agent?: string; turn: number }[] = []
    ctx.on('agent/turn', (info) => {
      turns.push({ agent: info.agent?.name, turn: info.turn })
    })
    const model = new ScriptedModel([{ text: 'one' }, { text: 'two' }])
    const session = new AgentSession(ctx, { model, agent })
    await session.send('first')
    await session.send('second')
    expect(turns).to.deep.equal([
      { agent: 'main', turn: 1 },
      { agent: 'main', turn: 2 },
    ])
  })

  it('stops at the step limit', async () => {
    const ctx = await deployment()
    addTool(ctx)
    const model = new ScriptedModel(Array.from({ length: 5 }, () => ({ toolCalls: [call('add', { a: 1, b: 1 })] })))
    const outcome = await new AgentSession(ctx, { model, maxSteps: 3 }).send('loop')
    expect(outcome).to.include({ reason: 'max-steps', steps: 3 })
    expect(model.played).to.equal(3)
  })

  it('lets a model error through, after recording the turn', async () => {
    const ctx = await deployment()
    const session = new AgentSession(ctx, { model: new ScriptedModel([]) })
    let error: unknown
    await session.send('hi').catch((e) => (error = e))
    expect(String(error)).to.match(/no turn 1/)
    // the session is usable again: the next turn fails for the same reason, not because a turn is still running
    let again: unknown
    await session.send('again').catch((e) => (again = e))
    expect(String(again)).to.match(/no turn 1/)
  })

  it('lets through what a model threw even when it has no prototype, and records the turn', async () => {
    // a model plugin may throw anything: reading its message must not throw in turn (String() of a prototype-less
    // value does), which replaced the model's own error with a TypeError and lost the turn's end
    const thrown = Object.create(null)
    const model = {
      name: 'odd',
      complete: async (): Promise<never> => {
        throw thrown
      },
    }
    const ctx = await deployment()
    const session = new AgentSession(ctx, { model })
    let error: unknown
    await session.send('hi').catch((e) => (error = e))
    expect(error).to.equal(thrown)
    let again: unknown
    await session.send('again').catch((e) => (again = e))
    expect(again).to.equal(thrown)
  })

  it('logs and ignores listeners that threw a value with no prototype, and the turn goes on', async () => {
    // each throws what String() cannot read: the warning that says it was ignored must not throw in turn
    const unshowable = () => {
      throw Object.create(null)
    }
    const warnings: string[] = []
    const target = { levels: { base: 2 }, record: (record: { type: string; content: string }) => record.type === 'warn' && warnings.push(record.content) }
    Logger.targets.push(target as never)
    try {
      const ctx = await deployment()
      for (const event of ['agent/turn', 'agent/model-request', 'prompt/sections'] as const) ctx.on(event, unshowable)
      const session = new AgentSession(ctx, { model: new ScriptedModel([{ text: 'done' }]), onEvent: unshowable })
      expect(await session.send('hi')).to.deep.include({ text: 'done' })
      for (const what of ['an agent/turn listener', 'an agent/model-request listener', 'a prompt/sections listener', 'a session onEvent callback'])
        expect(
          warnings.some((w) => w.startsWith(what) && w.includes(' threw') && w.endsWith(': an error that could not be shown')),
          what,
        ).to.equal(true)
    } finally {
      Logger.targets.splice(Logger.targets.indexOf(target as never), 1)
    }
  })

  it('answers a direct native call under code mode with UNKNOWN_TOOL and the route', async () => {
    const ctx = await deployment({ mode: 'code' })
    addTool(ctx)
    const model = new ScriptedModel([{ toolCalls: [call('add', { a: 1, b: 2 })] }, { text: 'understood' }])
    const session = new AgentSession(ctx, { model })
    await session.send('add')
    const tool = session.messages.find((m) => m.role === 'tool') as Extract<Message, { role: 'tool' }>
    expect(tool.isError).to.equal(true)
    expect(tool.content).to.match(/UNKNOWN_TOOL|unknown tool "add"/)
    expect(tool.content).to.include('tools.add(')
  })
})

describe('AgentSession: tool calls', () => {
  it('overlaps consecutive parallel calls up to maxParallel and keeps results in the model order', async () => {
    const ctx = await deployment()
    const gates = gatedTools(ctx)
    const keys = ['a', 'b', 'c', 'd']
    const model = new ScriptedModel([{ toolCalls: keys.map((key) => call('slow', { key })) }, { text: 'done' }])
    const session = new AgentSession(ctx, { model, maxParallel: 2 })
    const turn = session.send('go')
    await tick()
    expect(gates.events).to.deep.equal(['start a', 'start b'])
    gates.open('b')
    await tick()
    expect(gates.events).to.deep.equal(['start a', 'start b', 'end b', 'start c'])
    for (const key of ['d', 'c', 'a']) gates.open(key)
    await turn
    expect(gates.peak()).to.equal(2)
    const results = session.messages.filter((m) => m.role === 'tool').map((m) => m.content)
    expect(results).to.deep.equal(keys)
  })

  it('treats an exclusive call as a barrier', async () => {
    const ctx = await deployment()
    const gates = gatedTools(ctx)
    const model = new ScriptedModel([
      { toolCalls: [call('slow', { key: 'a' }), call('slow', { key: 'b' }), call('write', { key: 'w' }), call('slow', { key: 'c' })] },
      { text: 'done' },
    ])
    const turn = new AgentSession(ctx, { model }).send('go')
    await tick()
    expect(gates.events).to.deep.equal(['start a', 'start b'])
    gates.open('a')
    await tick()
    expect(gates.events).to.not.include('start w')
    gates.open('b')
    await tick()
    expect(gates.events.slice(-1)).to.deep.equal(['start w'])
    gates.open('w')
    gates.open('c')
    await turn
    expect(gates.events).to.deep.equal(['start a', 'start b', 'end a', 'end b', 'start w', 'end w', 'start c', 'end c'])
  })

  it('turns malformed tool-call JSON into INVALID_ARGUMENTS the model can correct', async () => {
    const ctx = await deployment()
    addTool(ctx)
    const model = new ScriptedModel([
      { toolCalls: [call('add', '{"a": 1, "b": ')] },
      ({ results }) => (results[0].isError ? { toolCalls: [call('add', { a: 1, b: 2 })] } : { text: 'unexpected' }),
      ({ results }) => ({ text: results[0].content }),
    ])
    const session = new AgentSession(ctx, { model })
    const outcome = await session.send('add')
    const first = session.messages[2] as Extract<Message, { role: 'tool' }>
    expect(first.isError).to.equal(true)
    expect(first.content).to.match(/^Error: the arguments of "add" are not valid JSON/)
    expect(outcome.text).to.equal('3')
  })

  it('on abort, gives started calls their result and unstarted calls an aborted one', async () => {
    const ctx = await deployment()
    const gates = gatedTools(ctx)
    const events: SessionEvent[] = []
    const model = new ScriptedModel([{ toolCalls: [call('slow', { key: 'a' }), call('write', { key: 'w' }), call('slow', { key: 'c' })] }])
    const session = new AgentSession(ctx, { model, onEvent: (e) => events.push(e) })
    const controller = new AbortController()
    const turn = session.send('go', { signal: controller.signal })
    await tick()
    expect(gates.events).to.deep.equal(['start a'])
    controller.abort()
    const outcome = await turn
    expect(outcome.reason).to.equal('aborted')
    expect(model.played).to.equal(1)
    const results = session.messages.filter((m) => m.role === 'tool')
    expect(results.map((m) => m.toolCallId)).to.deep.equal(['call_1', 'call_2', 'call_3'])
    expect(results[0].content).to.match(/cancelled while it ran/)
    expect(results[1].content).to.match(/cancelled before it started/)
    expect(results[2].content).to.match(/cancelled before it started/)
    expect(gates.events).to.deep.equal(['start a', 'end a'])
    expect(events.filter((e) => e.type === 'call-end')).to.have.length(3)
  })

  it('aborting while the model works ends the turn without a new message', async () => {
    const ctx = await deployment()
    const controller = new AbortController()
    const model = {
      name: 'hanging',
      complete: (request: ModelRequest) =>
        new Promise<never>((_, reject) => request.signal.addEventListener('abort', () => reject(request.signal.reason), { once: true })),
    }
    const session = new AgentSession(ctx, { model })
    const turn = session.send('hi', { signal: controller.signal })
    await tick()
    controller.abort()
    expect((await turn).reason).to.equal('aborted')
    expect(session.messages.map((m) => m.role)).to.deep.equal(['user'])
  })
})
