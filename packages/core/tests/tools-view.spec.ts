import ToolRuntime, { createAgent } from '@faber/core'
import { deployment, disposeAll, echoTool, signal } from '@faber/core/testing'
import { expect } from 'chai'
import { Context } from 'cordis'

const started = () => deployment({ mode: 'native' })

describe('ctx.tools, read plainly', () => {
  afterEach(disposeAll)

  it('hands every context the one executor, whichever way it reads the service', async () => {
    const ctx = await started()
    let inner: Context | undefined
    ctx.plugin({ name: 'reader', inject: ['tools'], apply: (c: Context) => void (inner = c) })
    await ctx.lifecycle.flush()
    const executor = ctx.tools.executor
    expect(Object.isFrozen(executor)).to.equal(true)
    expect(inner!.tools.executor).to.equal(executor)
    expect(ctx.get('tools')!.executor).to.equal(executor)
  })

  it('keeps what a plugin registers through it tied to that plugin, held or not', async () => {
    const ctx = await started()
    const fork = ctx.plugin({
      name: 'owner',
      inject: ['tools'],
      apply: (c: Context) => {
        const held = c.tools
        held.register(echoTool('held'))
        c.tools.register(echoTool('plain'))
      },
    })
    await ctx.lifecycle.flush()
    expect(ctx.tools.get('held')?.plugin).to.equal('owner')
    expect(ctx.tools.get('plain')?.plugin).to.equal('owner')
    fork.dispose()
    expect(ctx.tools.get('held')).to.equal(undefined)
    expect(ctx.tools.get('plain')).to.equal(undefined)
  })

  it("sees at once what any plugin's view registers or removes, whichever view read the tool set before", async () => {
    const ctx = await started()
    const call = (name: string) => ctx.tools.execute({ callId: name, name, arguments: { text: 'hi' }, signal: signal() })
    expect((await call('late')).isError).to.equal(true)
    expect(ctx.tools.schemas().map((s) => s.name)).to.deep.equal([])
    let inner: Context | undefined
    const fork = ctx.plugin({ name: 'late', inject: ['tools'], apply: (c: Context) => void (inner = c) })
    await ctx.lifecycle.flush()
    const dispose = inner!.tools.register(echoTool('late'))
    expect(ctx.tools.schemas().map((s) => s.name)).to.deep.equal(['late'])
    expect((await call('late')).isError).to.equal(false)
    dispose()
    expect((await call('late')).isError).to.equal(true)
    fork.dispose()
  })

  it('scopes registrations made through an agent context to that agent', async () => {
    const ctx = await started()
    const agent = createAgent(ctx, { name: 'a' })
    agent.ctx.tools.register(echoTool('mine'))
    expect(ctx.tools.get('mine', agent)?.owner).to.equal(agent)
    expect(ctx.tools.get('mine')).to.equal(undefined)
  })

  it('hands hot callers an executor that runs calls and registers nothing', async () => {
    const ctx = await started()
    ctx.tools.register(echoTool('echo'))
    const executor = ctx.tools.executor
    expect(executor).to.not.have.property('register')
    const prepared = executor.prepare({ callId: 'c1', name: 'echo', arguments: { text: 'hi' } })
    expect(prepared.mode).to.equal('exclusive')
    const result = await prepared.run(signal())
    expect(result.isError).to.equal(false)
    expect((await executor.execute({ callId: 'c2', name: 'nope', signal: signal() })).isError).to.equal(true)
  })

  it('follows the service when it is set anew or isolated: a context that read one reads what is there now', async () => {
    const ctx = new Context()
    const first = ctx.plugin(ToolRuntime, { mode: 'native' })
    await ctx.start()
    const before = ctx.tools
    before.register(echoTool('old'))
    first.dispose()
    expect(ctx.tools).to.equal(undefined)
    ctx.plugin(ToolRuntime, { mode: 'native' })
    await ctx.lifecycle.flush()
    const after = ctx.tools
    expect(after).to.not.equal(before)
    expect(after.get('old')).to.equal(undefined)
    after.register(echoTool('new'))
    expect(ctx.tools.get('new')?.plugin).to.equal('root')
    // a subtree with its own slot for the service reads that slot (empty here), and the root keeps reading the root's
    const isolated = ctx.isolate('tools')
    expect(isolated.tools).to.equal(undefined)
    expect(ctx.tools.get('new')?.name).to.equal('new')
    await ctx.stop()
  })
})
