import { assertStarted, CODE_ONLY_SECTION, createAgent, defineTool, type Mode, SDK_SECTION, t } from '@faber/core'
import { callId, deployment, echoTool, signal } from '@faber/core/testing'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'
import './helpers.ts'

const modes: Mode[] = ['native', 'code', 'both']

const names = (list: readonly { name: string }[]) => list.map((s) => s.name)

for (const mode of modes) {
  describe(`the registry under ${mode}`, () => {
    it('register adds a tool to the caller layer and returns a disposer', async () => {
      const ctx = await deployment({ mode })
      const dispose = ctx.tools.register(echoTool())
      expect(ctx.tools.get('echo')?.description).to.equal('echoes its text (echo)')
      dispose()
      expect(ctx.tools.get('echo')).to.equal(undefined)
    })

    it('a registered tool knows the plugin that registered it', async () => {
      const ctx = await deployment({ mode })
      ctx.plugin({ name: 'echoes', inject: ['tools'], apply: (ctx: Context) => void ctx.tools.register(echoTool()) })
      await assertStarted(ctx)
      expect(ctx.tools.get('echo')?.plugin).to.equal('echoes')
      if (mode !== 'native') expect(ctx.tools.get('run_code')?.plugin).to.equal('core')
    })

    it('register refuses a duplicate in the same layer, naming the owner', async () => {
      const ctx = await deployment({ mode })
      ctx.tools.register(echoTool())
      expect(() => ctx.tools.register(echoTool())).to.throw('tool "echo" is already registered globally by plugin "root"')
    })

    it('register refuses run_code', async () => {
      const ctx = await deployment({ mode })
      expect(() => ctx.tools.register({ ...echoTool(), name: 'run_code' })).to.throw('"run_code" is reserved')
      const agent = createAgent(ctx, { name: 'a' })
      expect(() => agent.ctx.tools.register({ ...echoTool(), name: 'run_code' })).to.throw('"run_code" is reserved')
    })

    it('register refuses a missing output declaration and unsupported schema constructs, naming them', async () => {
      const ctx = await deployment({ mode })
      const { output: _, ...noOutput } = echoTool()
      expect(() => ctx.tools.register(noOutput as never)).to.throw('tool "echo": output: is missing')
      expect(() =>
        ctx.tools.register({
          ...echoTool(),
          parameters: { type: 'object', properties: { p: { allOf: [{ type: 'string' }] } } },
        }),
      ).to.throw('parameters.properties.p: unsupported JSON-schema keyword "allOf"')
      expect(() => ctx.tools.register({ ...echoTool(), output: { schema: { $ref: '#/x' } } })).to.throw(
        'output.schema: "$ref" "#/x": only local references to a root definition, "#/$defs/<name>", are supported',
      )
      expect(() => ctx.tools.register({ ...echoTool(), parameters: t.string() })).to.throw('parameters: must be an object schema')
      expect(() => ctx.tools.register({ ...echoTool(), name: 'has space' })).to.throw('invalid tool name')
    })

    it('get is presentation-agnostic and applies shadowing and restrictions', async () => {
      const ctx = await deployment({ mode })
      ctx.tools.register(echoTool('read'))
      ctx.tools.register(echoTool('write'))
      const agent = createAgent(ctx, { name: 'a' })
      agent.ctx.tools.register({ ...echoTool('read'), description: 'the agent read' })
      agent.ctx.tools.restrict({ deny: ['write'] })
      expect(ctx.tools.get('read')?.description).to.equal('echoes its text (read)')
      expect(ctx.tools.get('read', agent)?.description).to.equal('the agent read')
      expect(ctx.tools.get('read', agent)?.owner).to.equal(agent)
      expect(ctx.tools.get('write')?.name).to.equal('write')
      expect(ctx.tools.get('write', agent)).to.equal(undefined)
      expect(ctx.tools.get('run_code')?.name).to.equal(mode === 'native' ? undefined : 'run_code')
    })

    it('schemas lists everything visible, sorted, with run_code unless native', async () => {
      const ctx = await deployment({ mode })
      ctx.tools.register(echoTool('zeta'))
      ctx.tools.register(echoTool('alpha'))
      const expected = mode === 'native' ? ['alpha', 'zeta'] : ['alpha', 'run_code', 'zeta']
      expect(names(ctx.tools.schemas())).to.deep.equal(expected)
      expect(ctx.tools.schemas()).to.equal(ctx.tools.schemas())
    })

    it('modeFor is the nearest presentAs, else the config mode', async () => {
      const ctx = await deployment({ mode })
      const parent = createAgent(ctx, { name: 'parent' })
      const child = createAgent(ctx, { name: 'child', parent })
      expect(ctx.tools.modeFor()).to.equal(mode)
      expect(ctx.tools.modeFor(child)).to.equal(mode)
      const other = modes.find((m) => m !== mode)!
      const dispose = parent.ctx.tools.presentAs(other)
      expect(ctx.tools.modeFor(child)).to.equal(other)
      expect(ctx.tools.modeOrigin(child)).to.deep.equal({ mode: other, from: parent })
      child.ctx.tools.presentAs(mode)
      expect(ctx.tools.modeOrigin(child)).to.deep.equal({ mode, from: child })
      expect(ctx.tools.modeFor(parent)).to.equal(other)
      dispose()
      expect(ctx.tools.modeOrigin(parent)).to.deep.equal({ mode, from: undefined })
    })

    it('wire shows what execute runs', async () => {
      const ctx = await deployment({ mode })
      ctx.tools.register(echoTool('read'))
      const wire = ctx.tools.wire()
      expect(wire.mode).to.equal(mode)
      expect(names(wire.tools)).to.deep.equal({ native: ['read'], code: ['run_code'], both: ['read', 'run_code'] }[mode])
      const codeOnly = wire.sections.find((s) => s.id === CODE_ONLY_SECTION)!
      expect(codeOnly.order).to.be.below(100)
      expect(codeOnly.text === '').to.equal(mode !== 'code')
      const sdk = wire.sections.find((s) => s.id === SDK_SECTION)
      expect(sdk === undefined).to.equal(mode === 'native')
      if (sdk) expect(sdk.text).to.match(/ {2}read\(args: \{ text: string \}\): Promise<.+>/)
      for (const shown of wire.tools) {
        const args = shown.name === 'run_code' ? { code: 'return 1', description: 'x' } : { text: 'x' }
        const result = await ctx.tools.execute({ callId: callId(), name: shown.name, arguments: args, signal: signal() })
        expect(result.isError && result.error.code).not.to.equal('UNKNOWN_TOOL')
      }
    })

    it('wire and the SDK are computed once per tool-set generation', async () => {
      const ctx = await deployment({ mode })
      ctx.tools.register(echoTool('read'))
      const first = ctx.tools.wire()
      expect(ctx.tools.wire()).to.equal(first)
      const generation = ctx.tools.generation
      const sdk = ctx.tools.sdkDeclarations()
      const dispose = ctx.tools.register(echoTool('write'))
      expect(ctx.tools.generation).to.be.above(generation)
      expect(ctx.tools.wire()).not.to.equal(first)
      expect(ctx.tools.sdkDeclarations()).to.contain('  write(args: { text: string })')
      dispose()
      // a new generation with the same tools renders byte-identical text (partly from each tool's cached types)
      expect(ctx.tools.sdkDeclarations()).to.equal(sdk)
    })

    it('presentAs is agent-scoped and validated', async () => {
      const ctx = await deployment({ mode })
      expect(() => ctx.tools.presentAs('code')).to.throw('agent-scoped')
      const agent = createAgent(ctx, { name: 'a' })
      expect(() => agent.ctx.tools.presentAs('fancy' as Mode)).to.throw('mode must be "native", "code" or "both"')
    })

    it('restrict masks inherited tools; masks intersect; run_code and unknown names are refused', async () => {
      const ctx = await deployment({ mode })
      for (const name of ['a', 'b', 'c']) ctx.tools.register(echoTool(name))
      const parent = createAgent(ctx, { name: 'parent' })
      const child = createAgent(ctx, { name: 'child', parent })
      parent.ctx.tools.restrict({ allow: ['a', 'b'] })
      child.ctx.tools.restrict({ deny: ['a'] })
      const visible = (agent: typeof parent) => names(ctx.tools.schemas(agent)).filter((n) => n !== 'run_code')
      expect(visible(parent)).to.deep.equal(['a', 'b'])
      expect(visible(child)).to.deep.equal(['b'])
      expect(() => child.ctx.tools.restrict({ deny: ['run_code'] })).to.throw('"run_code" cannot be restricted')
      expect(() => child.ctx.tools.restrict({ allow: ['c'] })).to.throw('"c" is not visible to agent "child"')
      expect(() => ctx.tools.restrict({ allow: ['a'] })).to.throw('agent-scoped')
      const denied = await ctx.tools.execute({ callId: callId(), name: 'a', arguments: { text: 'x' }, signal: signal(), agent: child })
      expect(denied.isError && denied.error.code).to.equal('UNKNOWN_TOOL')
      expect(ctx.tools.visibility(child).masked).to.deep.equal([
        { name: 'c', by: 'parent' },
        { name: 'a', by: 'child' },
      ])
    })

    it('guard denies with its reason, scoped to its layer, and leaves with its disposer', async () => {
      const ctx = await deployment({ mode: 'native' })
      ctx.tools.register(echoTool())
      const agent = createAgent(ctx, { name: 'a' })
      agent.ctx.tools.presentAs(mode === 'code' ? 'both' : mode)
      const dispose = agent.ctx.tools.guard((exec) => (exec.name === 'echo' ? 'echo is not for this agent' : undefined))
      const run = (a?: typeof agent) => ctx.tools.execute({ callId: callId(), name: 'echo', arguments: { text: 'x' }, signal: signal(), agent: a })
      const denied = await run(agent)
      expect(denied.isError && denied.error).to.deep.include({ code: 'DENIED', message: 'echo is not for this agent' })
      expect((await run()).isError).to.equal(false)
      dispose()
      expect((await run(agent)).isError).to.equal(false)
    })

    it('execute resolves exactly one frozen result', async () => {
      const ctx = await deployment({ mode })
      ctx.tools.register(echoTool())
      const agent = createAgent(ctx, { name: 'native' })
      agent.ctx.tools.presentAs('native')
      const result = await ctx.tools.execute({ callId: callId(), name: 'echo', arguments: { text: 'hello' }, signal: signal(), agent })
      expect(result).to.deep.include({ isError: false, value: { echoed: 'hello' }, content: 'hello' })
      expect(Object.isFrozen(result)).to.equal(true)
    })

    it('execute refuses a missing signal with a message that says what to pass', async () => {
      const ctx = await deployment({ mode })
      let error: unknown
      try {
        await ctx.tools.execute({ callId: '1', name: 'echo', arguments: {} } as never)
      } catch (e) {
        error = e
      }
      expect(String(error)).to.contain('signal is required; pass an AbortSignal')
    })

    it('executionMode is parallel only when isConcurrencySafe returns exactly true', async () => {
      const ctx = await deployment({ mode })
      const agent = createAgent(ctx, { name: 'a' })
      agent.ctx.tools.presentAs('both')
      const answers: Record<string, () => unknown> = {
        yes: () => true,
        truthy: () => 1,
        no: () => false,
        throws: () => {
          throw new Error('?')
        },
      }
      for (const [name, answer] of Object.entries(answers)) ctx.tools.register({ ...echoTool(name), isConcurrencySafe: answer as () => boolean })
      ctx.tools.register(echoTool('plain'))
      const modeOf = (name: string, args: unknown = { text: 'x' }) => ctx.tools.executionMode({ name, arguments: args, agent })
      expect(['yes', 'truthy', 'no', 'throws', 'plain', 'missing'].map((n) => modeOf(n))).to.deep.equal([
        'parallel',
        'exclusive',
        'exclusive',
        'exclusive',
        'exclusive',
        'exclusive',
      ])
      expect(modeOf('yes', { text: 1 })).to.equal('exclusive')
    })
  })
}

describe('tools/changed listeners', () => {
  it('each hears a change though another threw, and the registration that made it can still be disposed', async () => {
    const warnings: string[] = []
    const target = { levels: { base: 2 }, record: (record: { type: string; content: string }) => record.type === 'warn' && warnings.push(record.content) }
    Logger.targets.push(target as never)
    try {
      const ctx = await deployment({ mode: 'native' })
      const heard: number[] = []
      ctx.plugin({
        name: 'throws-on-change',
        apply: (ctx: Context) => {
          ctx.on('tools/changed', () => {
            throw Object.create(null)
          })
          ctx.on('tools/changed', async () => {
            throw new Error('later')
          })
        },
      })
      ctx.on('tools/changed', (generation) => void heard.push(generation))
      await assertStarted(ctx)
      const dispose = ctx.tools.register(echoTool())
      expect(ctx.tools.get('echo')).to.not.equal(undefined)
      dispose()
      expect(ctx.tools.get('echo')).to.equal(undefined)
      expect(heard).to.have.length(2)
      await new Promise((resolve) => setImmediate(resolve))
      const ignored = warnings.filter((w) => w.startsWith('a tools/changed listener of plugin "throws-on-change" threw (ignored)'))
      expect(ignored).to.have.length(4)
      expect(ignored.filter((w) => w.endsWith(': later'))).to.have.length(2)
    } finally {
      Logger.targets.splice(Logger.targets.indexOf(target as never), 1)
    }
  })
})

describe('defineTool', () => {
  it('infers argument and output types from its schemas', async () => {
    const tool = defineTool({
      name: 'typed',
      description: 'types flow from the schemas',
      parameters: t.object({ path: t.string(), limit: t.integer().optional(), mode: t.enum(['a', 'b']) }),
      output: { schema: t.object({ lines: t.array(t.string()), total: t.number() }) },
      execute: (args) => {
        const path: string = args.path
        const limit: number | undefined = args.limit
        const mode: 'a' | 'b' = args.mode
        // @ts-expect-error: not declared in the parameters
        args.other
        return { lines: [path, String(limit), mode], total: 3 }
      },
    })
    const ctx = await deployment()
    ctx.tools.register(tool)
    const result = await ctx.tools.execute({ callId: callId(), name: 'typed', arguments: { path: 'p', mode: 'a' }, signal: signal() })
    expect(result.isError ? result.content : result.value).to.deep.equal({ lines: ['p', 'undefined', 'a'], total: 3 })
  })
})
