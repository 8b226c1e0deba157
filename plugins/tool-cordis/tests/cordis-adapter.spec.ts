import { pluginName } from '@faber/core'
import { expect } from 'chai'
import { Context, Logger } from 'cordis'
import { listeners, onDisposed, pluginTree, type ScopeNode, serviceSlots } from '../src/cordis-adapter.ts'

Logger.levels.base = 0

function find(node: ScopeNode, name: string): ScopeNode | undefined {
  if (node.name === name) return node
  for (const child of node.children) {
    const found = find(child, name)
    if (found) return found
  }
}

function names(node: ScopeNode): string[] {
  return node.children.map((child) => child.name)
}

describe('cordis adapter: plugin tree', () => {
  it('nests what a plugin loads under it, for plain and reusable plugins', async () => {
    const ctx = new Context()
    const leaf = { name: 'leaf', apply() {} }
    const reusable = { name: 'reusable', reusable: true, apply: (c: Context) => c.plugin({ name: 'inner', apply() {} }) }
    ctx.plugin({
      name: 'outer',
      apply(c: Context) {
        c.plugin(leaf)
        c.plugin(reusable)
      },
    })
    await ctx.start()
    const tree = pluginTree(ctx)
    expect(tree.name).to.equal('root')
    expect(names(tree)).to.include('outer')
    expect(names(find(tree, 'outer')!)).to.deep.equal(['leaf', 'reusable'])
    expect(names(find(tree, 'reusable')!)).to.deep.equal(['inner'])
    expect(find(tree, 'reusable')!.reusable).to.equal(true)
    expect(find(tree, 'leaf')!.state).to.equal('active')
  })

  it('records the context a plugin was loaded on', async () => {
    const ctx = new Context()
    const marked = ctx.extend({ mark: 'here' })
    marked.plugin({ name: 'guest', apply() {} })
    await ctx.start()
    expect((find(pluginTree(ctx), 'guest')!.context as any).mark).to.equal('here')
  })

  it('shows a failed plugin with its error, whether apply threw or the config was invalid', async () => {
    const ctx = new Context()
    ctx.plugin({
      name: 'broken',
      apply() {
        throw new Error('boom')
      },
    })
    ctx.plugin({
      name: 'strict',
      Config: () => {
        throw new Error('bad config')
      },
      apply() {},
    } as any)
    await ctx.start()
    const tree = pluginTree(ctx)
    expect(find(tree, 'broken')).to.include({ state: 'failed', error: 'boom' })
    expect(find(tree, 'strict')).to.include({ state: 'failed', error: 'bad config' })
  })

  it('shows a plugin that threw a value that cannot be turned into text as failed, with a message saying so', async () => {
    const ctx = new Context()
    ctx.plugin({
      name: 'unshowable',
      apply() {
        // no prototype: String() of it throws a TypeError
        throw Object.create(null)
      },
    })
    await ctx.start()
    expect(find(pluginTree(ctx), 'unshowable')).to.include({ state: 'failed', error: 'an error that could not be shown' })
  })

  it('shows a plugin waiting for a service as pending, with what it waits for', async () => {
    const ctx = new Context()
    ctx.plugin({ name: 'needy', inject: ['nothing'], apply() {} })
    await ctx.start()
    expect(find(pluginTree(ctx), 'needy')).to.deep.include({ state: 'pending', waitingFor: ['nothing'] })
    ctx.set('nothing', { here: true })
    await ctx.lifecycle.flush()
    expect(find(pluginTree(ctx), 'needy')!.state).to.equal('active')
  })

  it('drops a disposed load from the tree and reports the disposal', async () => {
    const ctx = new Context()
    const seen: string[] = []
    onDisposed(ctx, ({ name }) => seen.push(name))
    const fork = ctx.plugin({ name: 'brief', apply: (c: Context) => c.plugin({ name: 'nested', apply() {} }) })
    await ctx.start()
    expect(find(pluginTree(ctx), 'nested')).to.not.equal(undefined)
    fork.dispose()
    expect(find(pluginTree(ctx), 'brief')).to.equal(undefined)
    expect(find(pluginTree(ctx), 'nested')).to.equal(undefined)
    expect(seen).to.include('brief')
  })
})

describe('cordis adapter: services', () => {
  it('lists set services with the plugin that provides them, and isolated slots', async () => {
    const ctx = new Context()
    ctx.plugin({ name: 'provider', apply: (c: Context) => c.set('thing', { a: 1 }) })
    ctx.isolate('thing').plugin({ name: 'other', apply: (c: Context) => c.set('thing', { b: 2 }) })
    await ctx.start()
    const slots = serviceSlots(ctx).filter((slot) => slot.name === 'thing')
    expect(slots.map(({ provider, isolated }) => ({ provider, isolated }))).to.deep.equal([
      { provider: 'provider', isolated: false },
      { provider: 'other', isolated: true },
    ])
    expect(pluginName(slots[0].context!)).to.equal('provider')
  })

  it('forgets a service when its provider is disposed', async () => {
    const ctx = new Context()
    const fork = ctx.plugin({ name: 'provider', apply: (c: Context) => c.set('thing', { a: 1 }) })
    await ctx.start()
    expect(serviceSlots(ctx).map((s) => s.name)).to.include('thing')
    fork.dispose()
    expect(serviceSlots(ctx).map((s) => s.name)).to.not.include('thing')
  })
})

describe('cordis adapter: listeners', () => {
  it('lists listeners per event in dispatch order with their plugin', async () => {
    const ctx = new Context()
    ctx.plugin({ name: 'first', apply: (c: Context) => c.on('custom/event' as any, () => {}) })
    ctx.plugin({ name: 'jumper', apply: (c: Context) => c.on('custom/event' as any, () => {}, { prepend: true }) })
    await ctx.start()
    const entries = listeners(ctx).filter((entry) => entry.event === 'custom/event')
    expect(entries.map(({ plugin, prepend }) => ({ plugin, prepend }))).to.deep.equal([
      { plugin: 'jumper', prepend: true },
      { plugin: 'first', prepend: false },
    ])
  })

  it('drops the listeners of a disposed plugin', async () => {
    const ctx = new Context()
    const fork = ctx.plugin({ name: 'first', apply: (c: Context) => c.on('custom/event' as any, () => {}) })
    await ctx.start()
    fork.dispose()
    expect(listeners(ctx).filter((entry) => entry.event === 'custom/event')).to.deep.equal([])
  })
})
