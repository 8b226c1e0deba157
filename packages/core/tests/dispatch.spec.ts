import { createAgent, dispatch, emitEach, firstAnswer, listenersFor, TIMED_OUT } from '@faber/core'
import { deployment, disposeAll } from '@faber/core/testing'
import { expect } from 'chai'
import type { Context, Events } from 'cordis'

const EVENT = 'probe/ask' as keyof Events

// a listener of plugin `name`, loaded on `ctx` (an agent's context puts it on that agent)
async function listen(ctx: Context, name: string, listener: (...args: any[]) => unknown) {
  ctx.plugin({ name, apply: (c: Context) => void c.on(EVENT, listener as never) })
  await ctx.lifecycle.flush()
}

describe('dispatch to agent-scoped listeners', () => {
  afterEach(disposeAll)

  it('calls the listeners in series, in order, each answer or throw with its plugin', async () => {
    const ctx = await deployment()
    const called: string[] = []
    await listen(ctx, 'one', (n: number) => {
      called.push('one')
      return n + 1
    })
    await listen(ctx, 'two', () => {
      called.push('two')
      throw new Error('no')
    })
    await listen(ctx, 'three', () => void called.push('three'))
    const steps = dispatch(listenersFor(ctx, EVENT, undefined), [1])
    expect(steps.next().value).to.deep.equal({ plugin: 'one', failed: false, value: 2 })
    // the next listener is called when the next answer is asked for
    expect(called).to.deep.equal(['one'])
    const rest = [...steps]
    expect(rest.map((a) => [a.plugin, a.failed])).to.deep.equal([
      ['two', true],
      ['three', false],
    ])
    expect(called).to.deep.equal(['one', 'two', 'three'])
  })

  it("reaches an agent's chain and the global listeners, and not another agent's", async () => {
    const ctx = await deployment()
    const parent = createAgent(ctx, { name: 'parent' })
    const child = createAgent(ctx, { name: 'child', parent })
    const other = createAgent(ctx, { name: 'other' })
    const heard: string[] = []
    await listen(ctx, 'global', () => void heard.push('global'))
    await listen(parent.ctx, 'parent', () => void heard.push('parent'))
    await listen(other.ctx, 'other', () => void heard.push('other'))
    emitEach(listenersFor(ctx, EVENT, child), [], () => undefined)
    expect(heard).to.deep.equal(['global', 'parent'])
  })

  it('emitEach tells every listener though one throws and one rejects, and reports both', async () => {
    const ctx = await deployment()
    const heard: string[] = []
    await listen(ctx, 'thrower', () => {
      throw new Error('sync')
    })
    await listen(ctx, 'rejecter', () => Promise.reject(new Error('async')))
    await listen(ctx, 'last', () => void heard.push('last'))
    const failures: string[] = []
    emitEach(listenersFor(ctx, EVENT, undefined), [], (plugin, error) => failures.push(`${plugin}: ${(error as Error).message}`))
    expect(heard).to.deep.equal(['last'])
    await new Promise((resolve) => setImmediate(resolve))
    expect(failures).to.deep.equal(['thrower: sync', 'rejecter: async'])
  })

  it('firstAnswer skips the listeners that answer nothing and stops at the first that answers', async () => {
    const ctx = await deployment()
    const asked: string[] = []
    await listen(ctx, 'silent', async () => undefined)
    await listen(ctx, 'answers', async () => 'yes')
    await listen(ctx, 'never', () => 'not asked')
    const answer = await firstAnswer(listenersFor(ctx, EVENT, undefined), [], { asking: (plugin) => void asked.push(plugin) })
    expect(answer).to.deep.equal({ plugin: 'answers', failed: false, value: 'yes' })
    expect(asked).to.deep.equal(['silent', 'answers'])
  })

  it("firstAnswer stops at a listener that fails or outlasts its plugin's deadline", async () => {
    const ctx = await deployment()
    await listen(ctx, 'slow', () => new Promise(() => undefined))
    await listen(ctx, 'after', () => 'late')
    const timed = await firstAnswer(listenersFor(ctx, EVENT, undefined), [], { deadline: (plugin) => (plugin === 'slow' ? 20 : undefined) })
    expect(timed).to.deep.equal({ plugin: 'slow', failed: false, value: TIMED_OUT })
    const failing = await deployment()
    await listen(failing, 'rejects', () => Promise.reject(new Error('down')))
    await listen(failing, 'after', () => 'late')
    const failed = await firstAnswer(listenersFor(failing, EVENT, undefined), [])
    expect(failed).to.include({ plugin: 'rejects', failed: true })
    expect(await firstAnswer(listenersFor(await deployment(), EVENT, undefined), [])).to.equal(undefined)
  })
})
