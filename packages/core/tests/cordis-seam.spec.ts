import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { untraced } from '@faber/core'
import { expect } from 'chai'
import { Context, Logger } from 'cordis'
import { ADAPTERS, importCycles, internalsReaders, workspaceFiles } from './structure.ts'

const root = join(dirname(fileURLToPath(import.meta.url)), '../../..')

// besides the adapters: the inspector's own specs check what it reports against cordis' registry, and this spec's
// patterns are written down in structure.ts
const ALSO = [/^plugins\/tool-cordis\/tests\//, /^packages\/core\/tests\/structure\.ts$/]

describe('the cordis seam', () => {
  // cordis' internals are read in two adapters only, so a cordis upgrade touches two files
  it('only the adapters read cordis internals: sources, tests, benchmarks, examples and scripts', () => {
    const readers = internalsReaders(root, workspaceFiles(root)).filter(
      (reader) => !ADAPTERS.includes(reader.file) && !ALSO.some((allowed) => allowed.test(reader.file)),
    )
    expect(readers.map(({ file, reads }) => `${file} (${reads})`)).to.deep.equal([])
  })

  it('core has no import cycles, type-only imports included', () => {
    expect(importCycles(join(root, 'packages/core/src'))).to.deep.equal([])
  })

  it('the cycle check sees type-only imports, re-exports and dynamic imports', () => {
    expect(importCycles(join(root, 'packages/core/tests/fixtures/cycle'))).to.deep.equal(['a.ts → b.ts → c.ts → a.ts', 'self.ts → self.ts'])
  })
})

// core answers cordis' context proxy handler itself (cordis.ts): these pin the answers cordis users rely on
describe("reads of a context's properties, as cordis answers them", () => {
  const contexts: Context[] = []
  // the warnings these provoke are read from the context; cordis' logger would print them too
  before(() => void (Logger.levels.app = 0))
  after(() => void delete Logger.levels.app)
  afterEach(async () => {
    for (const ctx of contexts.splice(0)) await ctx.stop()
  })

  /** a started root with a `probe` service, and the warnings it emits */
  async function root() {
    const ctx = new Context()
    contexts.push(ctx)
    const warnings: Error[] = []
    ctx.on('internal/warning', (warning: Error) => void warnings.push(warning))
    ctx.provide('probe')
    ctx.set('probe', { answer: 42 })
    await ctx.start()
    return { ctx, warnings }
  }

  /** `read` run inside a plugin that declares `inject` */
  async function inPlugin<T>(ctx: Context, inject: string[], read: (c: Context) => T): Promise<T> {
    let value: T | undefined
    ctx.plugin({ name: 'reader', inject, apply: (c: Context) => void (value = read(c)) })
    await ctx.lifecycle.flush()
    return value as T
  }

  it('warns of a service a plugin reads without declaring it, with a stack that starts at the read', async () => {
    const { ctx, warnings } = await root()
    const value = await inPlugin(ctx, [], (c) => (c as unknown as { probe: { answer: number } }).probe)
    expect(value.answer).to.equal(42)
    expect(warnings.map((w) => w.message)).to.deep.equal(['property probe is not registered, declare it as `inject` to suppress this warning'])
    expect(warnings[0].stack!.split('\n')[1]).to.include('cordis-seam.spec.ts')
  })

  it('warns of an unknown property a plugin reads, and answers it from the context', async () => {
    const { ctx, warnings } = await root()
    const value = await inPlugin(ctx, [], (c) => (c as unknown as { nothing?: unknown }).nothing)
    expect(value).to.equal(undefined)
    expect(warnings.map((w) => w.message)).to.deep.equal(['property nothing is not registered, declare it as `inject` to suppress this warning'])
    expect(warnings[0].stack!.split('\n')[1]).to.include('cordis-seam.spec.ts')
  })

  it('does not warn of a declared service, accessors, builtin services, or reads at the root', async () => {
    const { ctx, warnings } = await root()
    const read = (c: Context) => [
      (c as unknown as { probe: { answer: number } }).probe.answer,
      typeof c.emit,
      typeof c.on,
      typeof c.plugin,
      typeof c.logger,
      typeof c.timer,
      c.runtime.name,
    ]
    expect(await inPlugin(ctx, ['probe'], read)).to.deep.equal([42, 'function', 'function', 'function', 'function', 'object', 'reader'])
    expect(read(ctx)[0]).to.equal(42)
    expect(warnings).to.deep.equal([])
  })

  it('ties what a plugin registers through the lifecycle, read in every way, to that plugin', async () => {
    const { ctx } = await root()
    const heard: string[] = []
    type Events = { on(name: string, listener: () => void): unknown }
    const listen = (events: unknown, label: string) => (events as Events).on('probe/event', () => void heard.push(label))
    const fork = await inPlugin(ctx, [], (c) => {
      listen(c, 'on')
      listen(c.lifecycle, 'lifecycle')
      listen(c.events, 'events')
      return c.scope
    })
    const emit = () => (ctx as unknown as { emit(name: string): void }).emit('probe/event')
    emit()
    expect(heard).to.deep.equal(['on', 'lifecycle', 'events'])
    fork.dispose()
    emit()
    expect(heard).to.have.length(3)
  })

  it("hands a traced value's methods the reading context, and its getters a shadow over it", async () => {
    const { ctx } = await root()
    // a value that carries the lifecycle's tracker, held as a plain property of the root: read from a plugin, cordis
    // traces it for that plugin. a proxy on its prototype chain sees the read's receiver, as on cordis' own path
    let received: { ctx?: Context } | undefined
    const seer = new Proxy(untraced(ctx.lifecycle), {
      get(target, key, receiver) {
        if (key === 'unseen') received = receiver
        return Reflect.get(target, key, receiver)
      },
    })
    const held = Object.create(seer, {
      ctx: { value: ctx, writable: true, configurable: true },
      viaGetter: {
        get(this: { ctx: Context }) {
          return this.ctx
        },
      },
      viaMethod: {
        value(this: { ctx: Context }) {
          return this.ctx
        },
      },
    })
    ;(ctx as unknown as { held: unknown }).held = held
    type Held = { viaGetter: Context; viaMethod(): Context; unseen?: unknown }
    const [reader, viaGetter, viaMethod] = await inPlugin(ctx, [], (c) => {
      const traced = (c as unknown as { held: Held }).held
      void traced.unseen
      return [c, traced.viaGetter, traced.viaMethod()]
    })
    expect(viaMethod).to.equal(reader)
    expect(viaGetter).to.not.equal(reader)
    expect(Object.getPrototypeOf(viaGetter)).to.equal(reader)
    expect(received?.ctx).to.not.equal(reader)
    expect(Object.getPrototypeOf(received?.ctx)).to.equal(reader)
  })
})
