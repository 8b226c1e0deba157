import ToolRuntime, { assertStarted, ConfigKeyError, defineConfig, nearestKey, strict } from '@faber/core'
import { expect } from 'chai'
import { Context, Schema } from 'cordis'
import './helpers.ts'

function rejection(run: () => unknown): Error {
  try {
    run()
  } catch (error) {
    return error as Error
  }
  throw new Error('expected the config to be rejected')
}

describe('strict configuration', () => {
  const rule = Schema.object({ tools: Schema.array(String).default(['*']), reason: Schema.string().required() })
  const config = strict(
    Schema.object({
      deny: Schema.array(rule).default([]),
      limits: Schema.dict(Schema.object({ perTurn: Schema.natural() })).default({}),
      model: Schema.union([
        Schema.object({ provider: Schema.const('a'), url: Schema.string() }),
        Schema.object({ provider: Schema.const('b'), key: Schema.string() }),
      ]),
      mode: Schema.union(['fast', 'slow']).default('fast'),
      any: Schema.any(),
    }),
  )

  it('rejects a misspelt top-level key, naming it and the nearest valid key', () => {
    const error = rejection(() => config({ dney: [] } as never))
    expect(ConfigKeyError.isInstance(error)).to.equal(true)
    expect(error.message).to.equal('`dney`: unknown key; did you mean `deny`?')
    expect((error as ConfigKeyError).options.path).to.deep.equal(['dney'])
  })

  it('rejects unknown keys inside arrays, dicts and union branches, with the full key path', () => {
    expect(rejection(() => config({ deny: [{ reason: 'x' }, { resaon: 'x' }] } as never)).message).to.equal(
      '`deny[1].resaon`: unknown key; did you mean `reason`?',
    )
    expect(rejection(() => config({ limits: { write: { perTrun: 1 } } } as never)).message).to.equal(
      '`limits.write.perTrun`: unknown key; did you mean `perTurn`?',
    )
    expect(rejection(() => config({ model: { provider: 'b', kye: 'k' } } as never)).message).to.equal('`model.kye`: unknown key; did you mean `key`?')
  })

  it('checks a config it produced again when it comes back changed', () => {
    const resolved = config({ model: { provider: 'a', url: 'u' } }) as Record<string, unknown>
    resolved.dney = [{ reason: 'typo' }]
    expect(rejection(() => config(resolved as never)).message).to.equal('`dney`: unknown key; did you mean `deny`?')
    Reflect.deleteProperty(resolved, 'dney')
    resolved.deny = [{ tools: ['write'] }]
    expect(() => config(resolved as never)).to.throw(/reason/)
  })

  it('hands back as it is a config it produced, while nothing in it changed', () => {
    const resolved = ToolRuntime.Config({ mode: 'code', codeLimits: { cpuMs: 50 } })
    expect(ToolRuntime.Config(resolved)).to.equal(resolved)
    // under ctx.plugin, cordis resolves it and the constructor resolves what cordis produced
    const ctx = new Context()
    ctx.plugin(ToolRuntime, resolved)
    expect(ctx.tools.config).to.equal(resolved)
  })

  it('checks a plain config it produced again when a value in it changed, nested ones included', () => {
    const resolved = ToolRuntime.Config({ mode: 'code' }) as unknown as Record<string, any>
    resolved.codeLimits.cpums = 5
    expect(rejection(() => ToolRuntime.Config(resolved)).message).to.equal('`codeLimits.cpums`: unknown key; did you mean `cpuMs`?')
    delete resolved.codeLimits.cpums
    resolved.codeLimits.cpuMs = -1
    expect(() => ToolRuntime.Config(resolved)).to.throw(/cpuMs/)
    resolved.codeLimits.cpuMs = 10
    resolved.sdkBudget = 0
    expect(() => ToolRuntime.Config(resolved)).to.throw(/sdkBudget/)
  })

  it('lists the valid keys when none is near', () => {
    expect(rejection(() => config({ zzzzzzzz: 1 } as never)).message).to.equal(
      '`zzzzzzzz`: unknown key; expected one of `deny`, `limits`, `model`, `mode`, `any`',
    )
  })

  it('accepts what the schema knows, fills defaults, and leaves opaque values alone', () => {
    expect(config({ deny: [{ reason: 'r' }], model: { provider: 'a', url: 'u' }, any: { whatever: 1 } } as never)).to.deep.include({
      deny: [{ tools: ['*'], reason: 'r' }],
      mode: 'fast',
      any: { whatever: 1 },
    })
    expect(config(undefined)).to.deep.include({ deny: [], mode: 'fast' })
  })

  it('still reports wrong values the way schemastery does', () => {
    expect(rejection(() => config({ deny: [{ tools: ['x'] }] } as never)).message).to.equal('$.deny[0].reason missing required value')
  })

  it('guesses only near misses', () => {
    expect(nearestKey('poolSise', ['poolSize', 'limits'])).to.equal('poolSize')
    expect(nearestKey('breakr', ['deny', 'paths', 'breaker'])).to.equal('breaker')
    expect(nearestKey('ROOT', ['root'])).to.equal('root')
    expect(nearestKey('timeout', ['deny', 'paths'])).to.equal(undefined)
  })

  it("the runtime's own config is strict: a misspelt key stops it from starting", async () => {
    const ctx = new Context()
    ctx.plugin(ToolRuntime, { mode: 'code', codeLimits: { cpuMS: 10 } } as never)
    const error = await assertStarted(ctx).then(
      () => undefined,
      (e: Error) => e,
    )
    expect(error?.message).to.equal('plugin "tools" failed to start: `codeLimits.cpuMS`: unknown key; did you mean `cpuMs`?')
    expect(ctx.get('tools')).to.equal(undefined)
  })
})

describe('defineConfig: a schema checked against its types', () => {
  interface Config {
    limit: number
    rules: { tool: string; reason?: string }[]
    stream?: unknown
  }
  type ConfigInput = { limit?: number; rules?: { tool: string; reason?: string }[]; stream?: unknown }
  const rules = Schema.array(Schema.object({ tool: Schema.string().required(), reason: Schema.string() })).default([])

  it('accepts a schema that matches, and is strict', () => {
    const Config = defineConfig<Config, ConfigInput>()(Schema.object({ limit: Schema.natural().default(3), rules, stream: Schema.any() }))
    expect(Config({})).to.deep.equal({ limit: 3, rules: [] })
    expect(rejection(() => Config({ limt: 1 } as ConfigInput))).to.be.instanceOf(ConfigKeyError)
  })

  it('rejects drift at compile time: a key only in the schema, only in the type, or of another type', () => {
    const extra = Schema.array(Schema.object({ tool: Schema.string(), reason: Schema.string(), extra: Schema.string() }))
    // @ts-expect-error a nested key the types do not have
    defineConfig<Config, ConfigInput>()(Schema.object({ limit: Schema.natural(), rules: extra, stream: Schema.any() }))
    // @ts-expect-error `limit` is missing from the schema
    defineConfig<Config, ConfigInput>()(Schema.object({ rules, stream: Schema.any() }))
    // @ts-expect-error `limit` is a string in the schema
    defineConfig<Config, ConfigInput>()(Schema.object({ limit: Schema.string(), rules, stream: Schema.any() }))
    // @ts-expect-error the input type has a key the schema does not
    defineConfig<Config, ConfigInput & { more?: boolean }>()(Schema.object({ limit: Schema.natural(), rules, stream: Schema.any() }))
  })
})
