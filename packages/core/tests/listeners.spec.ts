import { createAgent, listenersFor } from '@faber/core'
import { call, deployment, disposeAll, echoTool, value } from '@faber/core/testing'
import { expect } from 'chai'
import type { Context } from 'cordis'

// which listeners hear a call is decided once per event and agent and kept until a listener comes or goes; these pin
// that the kept lists follow every way the hook table changes
describe('listeners kept per event and agent', () => {
  afterEach(disposeAll)

  async function started() {
    return deployment({ mode: 'native' }, (ctx) => void ctx.tools.register(echoTool()))
  }

  /** a plugin that records, under `label`, each tools/pre-execute it hears */
  function recorder(heard: string[], label: string) {
    return {
      name: `recorder-${label}`,
      reusable: true,
      apply: (c: Context) => void c.on('tools/pre-execute', (exec) => void heard.push(`${label}:${exec.name}`)),
    }
  }

  it('hands out a frozen list that later changes leave as it was', async () => {
    const ctx = await started()
    ctx.on('tools/result', () => undefined)
    const first = listenersFor(ctx, 'tools/result', undefined)
    expect(first).to.have.length(1)
    expect(Object.isFrozen(first)).to.equal(true)
    const dispose = ctx.on('tools/result', () => undefined)
    const second = listenersFor(ctx, 'tools/result', undefined)
    expect(second).to.have.length(2)
    expect(first).to.have.length(1)
    dispose()
    expect(listenersFor(ctx, 'tools/result', undefined)).to.have.length(1)
  })

  it('hears a plugin loaded, unloaded and reloaded between calls', async () => {
    const ctx = await started()
    const heard: string[] = []
    value(await call(ctx, 'echo', { text: 'a' }))
    const fork = ctx.plugin(recorder(heard, 'one'), {})
    await ctx.lifecycle.flush()
    value(await call(ctx, 'echo', { text: 'b' }))
    expect(heard).to.deep.equal(['one:echo'])
    fork.dispose()
    value(await call(ctx, 'echo', { text: 'c' }))
    expect(heard).to.deep.equal(['one:echo'])
    const again = ctx.plugin(recorder(heard, 'two'), {})
    await ctx.lifecycle.flush()
    value(await call(ctx, 'echo', { text: 'd' }))
    // a config change restarts the load: its listener is removed and added again, and heard once
    again.update({ changed: true })
    await ctx.lifecycle.flush()
    value(await call(ctx, 'echo', { text: 'e' }))
    expect(heard).to.deep.equal(['one:echo', 'two:echo', 'two:echo'])
  })

  it("keeps a plugin loaded on an agent to that agent's calls, and forgets it when it is unloaded", async () => {
    const ctx = await started()
    const worker = createAgent(ctx, { name: 'worker' })
    const other = createAgent(ctx, { name: 'other' })
    const heard: string[] = []
    for (const agent of [undefined, worker, other]) value(await call(ctx, 'echo', { text: 'warm' }, { agent }))
    const fork = worker.ctx.plugin(recorder(heard, 'worker'), {})
    await ctx.lifecycle.flush()
    for (const agent of [undefined, worker, other]) value(await call(ctx, 'echo', { text: 'x' }, { agent }))
    expect(heard).to.deep.equal(['worker:echo'])
    fork.dispose()
    value(await call(ctx, 'echo', { text: 'y' }, { agent: worker }))
    expect(heard).to.deep.equal(['worker:echo'])
  })

  it('a listener that disposes itself inside the dispatch: the call still reaches the rest, the next call does not reach it', async () => {
    const ctx = await started()
    const heard: string[] = []
    const dispose = ctx.on('tools/pre-execute', () => {
      heard.push('once')
      dispose()
    })
    ctx.on('tools/pre-execute', () => void heard.push('after'))
    value(await call(ctx, 'echo', { text: 'a' }))
    value(await call(ctx, 'echo', { text: 'b' }))
    expect(heard).to.deep.equal(['once', 'after', 'after'])
  })

  it('a tools.listen listener that disposes itself inside the dispatch, and one added inside it', async () => {
    const ctx = await started()
    const heard: string[] = []
    const dispose = ctx.tools.listen('tools/result', () => {
      heard.push('once')
      dispose()
      ctx.tools.listen('tools/result', () => void heard.push('added'))
    })
    ctx.tools.listen('tools/result', () => void heard.push('kept'))
    value(await call(ctx, 'echo', { text: 'a' }))
    value(await call(ctx, 'echo', { text: 'b' }))
    expect(heard).to.deep.equal(['once', 'kept', 'kept', 'added'])
  })

  it("an agent's listener registered with { global: true } hears every call, in the pipeline and through listenersFor alike", async () => {
    const ctx = await started()
    const worker = createAgent(ctx, { name: 'worker' })
    const heard: string[] = []
    worker.ctx.on('tools/pre-execute', (exec) => void heard.push(exec.agent?.name ?? 'global'), { global: true })
    value(await call(ctx, 'echo', { text: 'a' }))
    value(await call(ctx, 'echo', { text: 'b' }, { agent: worker }))
    expect(heard).to.deep.equal(['global', 'worker'])
    expect(listenersFor(ctx, 'tools/pre-execute', undefined)).to.have.length(1)
  })
})
