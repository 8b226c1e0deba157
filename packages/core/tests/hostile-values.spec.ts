// hostile values: whatever a caller passes as arguments, a body returns or a program sends across the bridge,
// execute resolves with one result, the snapshot is total and linear, keys are data, and no promise is left unhandled.

import {
  type BridgeReply,
  createAgent,
  defineTool,
  type Execution,
  errorResult,
  type Json,
  JsonError,
  MAX_JSON_DEPTH,
  MAX_JSON_VALUES,
  snapshot,
  type ToolResult,
  ToolResultError,
  t,
} from '@faber/core'
import { callId, deployment, echoTool, signal } from '@faber/core/testing'
import { expect } from 'chai'
import type { Context } from 'cordis'
import fc from 'fast-check'
import { adoptParsed } from '../src/json.ts'
import { ScriptedCodeRuntime } from './helpers.ts'

const HOSTILE_KEYS = ['__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', 'valueOf', '__defineGetter__', 'then', 'length', '0', '']

function nested(depth: number, kind: 'object' | 'array' = 'object'): unknown {
  let value: unknown = 0
  for (let i = 0; i < depth; i++) value = kind === 'object' ? { x: value } : [value]
  return value
}

/** a value that describes 2^levels leaves with `levels` arrays: linear to hold, exponential to walk as a tree */
function shared(levels: number) {
  let value: unknown = [0]
  for (let i = 0; i < levels; i++) value = [value, value]
  return value
}

function code(result: ToolResult) {
  return result.isError ? result.error.code : 'OK'
}

function isDeeplyFrozen(value: unknown): boolean {
  if (value === null || typeof value !== 'object') return true
  if (!Object.isFrozen(value)) return false
  const proto = Object.getPrototypeOf(value)
  if (proto !== Object.prototype && proto !== Array.prototype) return false
  return Object.keys(value).every((key) => isDeeplyFrozen((value as Record<string, unknown>)[key]))
}

// Object.prototype and Array.prototype as the test process had them: nothing may add to them or change them
const pristine = () => [Object.getOwnPropertyNames(Object.prototype).join(), Object.getOwnPropertyNames(Array.prototype).join(), Object.getPrototypeOf({})]

/** records promise rejections nobody handled while the test ran (the run-wide check is scripts/mocha-unhandled.cjs) */
function watchRejections() {
  const reasons: unknown[] = []
  const listener = (reason: unknown) => void reasons.push(reason)
  process.on('unhandledRejection', listener)
  return {
    reasons,
    async stop() {
      // unhandled rejections are reported after the microtask queue drains
      await new Promise((resolve) => setImmediate(resolve))
      await new Promise((resolve) => setImmediate(resolve))
      process.off('unhandledRejection', listener)
      return reasons
    },
  }
}

// ---- arbitraries: JSON with hostile keys, and worse

const key = fc.oneof(fc.constantFrom(...HOSTILE_KEYS), fc.string({ maxLength: 6 }))
const primitive = fc.oneof(fc.string({ maxLength: 8 }), fc.boolean(), fc.constant(null), fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }))

const { json } = fc.letrec<{ json: unknown }>((tie) => ({
  json: fc.oneof(
    { depthSize: 'small' },
    primitive,
    fc.array(tie('json'), { maxLength: 4 }),
    // fromEntries defines own properties, so `__proto__` is a key like any other
    fc.array(fc.tuple(key, tie('json')), { maxLength: 4 }).map((entries) => Object.fromEntries(entries)),
  ),
}))

// a hostile value is generated as a recipe and built inside the property: fast-check itself probes the values it
// generates, and a proxy with throwing traps would throw in fast-check instead of in the code under test
type Recipe =
  | { k: 'primitive'; value: unknown }
  | { k: 'odd'; index: number }
  | { k: 'array' | 'sparse'; items: Recipe[] }
  | { k: 'object'; entries: [string, Recipe][] }
  | { k: 'proxy'; inner: Recipe }
  | { k: 'trap'; trap: string; inner: Recipe }
  | { k: 'revoked' }
  | { k: 'getter'; throws: boolean; inner: Recipe }
  | { k: 'deep' | 'cycle'; depth: number }

const ODD: (() => unknown)[] = [
  () => undefined,
  () => Number.NaN,
  () => -0,
  () => Number.POSITIVE_INFINITY,
  () => 1n,
  () => Symbol('s'),
  () => () => 1,
  () => new Date(0),
  () => new Map(),
  () => /x/,
  () => Object.create(null),
  () => new (class Point {})(),
]

const { recipe } = fc.letrec<{ recipe: Recipe }>((tie) => ({
  recipe: fc.oneof(
    { depthSize: 'small' },
    fc.record({ k: fc.constant('primitive' as const), value: primitive }),
    fc.record({ k: fc.constant('odd' as const), index: fc.nat(ODD.length - 1) }),
    fc.record({ k: fc.constantFrom('array' as const, 'sparse' as const), items: fc.array(tie('recipe'), { maxLength: 4 }) }),
    fc.record({ k: fc.constant('object' as const), entries: fc.array(fc.tuple(key, tie('recipe')), { maxLength: 4 }) }),
    fc.record({ k: fc.constant('proxy' as const), inner: tie('recipe') }),
    fc.record({
      k: fc.constant('trap' as const),
      trap: fc.constantFrom('get', 'ownKeys', 'getPrototypeOf', 'has', 'getOwnPropertyDescriptor'),
      inner: tie('recipe'),
    }),
    fc.record({ k: fc.constant('revoked' as const) }),
    fc.record({ k: fc.constant('getter' as const), throws: fc.boolean(), inner: tie('recipe') }),
    fc.record({ k: fc.constant('deep' as const), depth: fc.nat(600) }),
    fc.record({ k: fc.constant('cycle' as const), depth: fc.nat(40) }),
  ),
}))

/**
 * whether the recipe builds an object whose `then` is a function: a body returning it has returned a promise (one that
 * never settles here, like a body that never returns), which the pipeline awaits as any other
 */
function thenable(recipe: Recipe) {
  if (recipe.k !== 'object') return false
  let then: Recipe | undefined
  for (const [name, inner] of recipe.entries) if (name === 'then') then = inner
  return then?.k === 'odd' && typeof ODD[then.index]() === 'function'
}

function build(recipe: Recipe): unknown {
  switch (recipe.k) {
    case 'primitive':
      return recipe.value
    case 'odd':
      return ODD[recipe.index]()
    case 'array':
      return recipe.items.map(build)
    case 'sparse': {
      const items = recipe.items.map(build)
      items.length += 2
      return items
    }
    case 'object':
      return Object.fromEntries(recipe.entries.map(([name, inner]) => [name, build(inner)]))
    case 'proxy':
      return new Proxy({ inner: build(recipe.inner) }, {})
    case 'trap': {
      const inner = build(recipe.inner)
      const thrower = () => {
        throw new Error(`trap ${recipe.trap}`)
      }
      return new Proxy(recipe.inner.k === 'array' ? (inner as unknown[]) : { inner }, { [recipe.trap]: thrower })
    }
    case 'revoked': {
      const { proxy, revoke } = Proxy.revocable({}, {})
      revoke()
      return proxy
    }
    case 'getter': {
      const inner = build(recipe.inner)
      return Object.defineProperty({}, 'lazy', {
        enumerable: true,
        get() {
          if (recipe.throws) throw new Error('getter')
          return inner
        },
      })
    }
    case 'deep':
      return nested(recipe.depth)
    case 'cycle': {
      const root: Record<string, unknown> = {}
      let at = root
      for (let i = 0; i < recipe.depth; i++) at = at.next = {}
      at.back = root
      return root
    }
  }
}

describe('the snapshot is total', () => {
  it('JSON with hostile keys comes back equal, frozen, keys as own properties, no prototype touched', () => {
    const before = pristine()
    fc.assert(
      fc.property(json, (value) => {
        const copy = snapshot(value)
        expect(JSON.stringify(copy)).to.equal(JSON.stringify(value))
        expect(isDeeplyFrozen(copy)).to.equal(true)
        if (value !== null && typeof value === 'object') expect(Object.keys(copy as object)).to.deep.equal(Object.keys(value))
      }),
      { numRuns: 300 },
    )
    expect(pristine()).to.deep.equal(before)
  })

  it('anything at all gives a frozen JSON copy or a JsonError naming a path, never another throw', () => {
    const before = pristine()
    fc.assert(
      fc.property(recipe, (made) => {
        const value = build(made)
        let copy: Json
        try {
          copy = snapshot(value)
        } catch (error) {
          expect(error).to.be.instanceOf(JsonError)
          expect((error as JsonError).path).to.match(/^\$/)
          return
        }
        expect(JSON.parse(JSON.stringify(copy))).to.deep.equal(copy)
        expect(isDeeplyFrozen(copy)).to.equal(true)
      }),
      { numRuns: 500 },
    )
    expect(pristine()).to.deep.equal(before)
  })

  it(`refuses nesting deeper than ${MAX_JSON_DEPTH} levels at any depth, naming the path, without overflowing`, () => {
    expect(() => snapshot(nested(MAX_JSON_DEPTH))).not.to.throw()
    for (const depth of [MAX_JSON_DEPTH + 1, 8000, 200_000]) {
      for (const kind of ['object', 'array'] as const) {
        expect(() => snapshot(nested(depth, kind)))
          .to.throw(JsonError, `is nested deeper than ${MAX_JSON_DEPTH} levels`)
          .with.property('path')
          .that.matches(kind === 'object' ? /^\$\.x\.x\.x/ : /^\$\[0\]\[0\]/)
      }
    }
  })

  it(`stops at ${MAX_JSON_VALUES} values a few shared references make look like 2^60`, () => {
    expect(() => snapshot(shared(60))).to.throw(JsonError, `larger than ${MAX_JSON_VALUES} values`)
    const claiming = (length: unknown) => new Proxy([], { get: (_, name) => (name === 'length' ? length : undefined) })
    expect(() => snapshot(claiming('5'))).to.throw(JsonError, '$ claims a length of 5, which no array has')
    expect(() => snapshot(claiming(-1))).to.throw(JsonError, '$ claims a length of -1, which no array has')
    expect(() => snapshot(claiming(2 ** 40))).to.throw(JsonError, 'is an array of 1099511627776 items, more than the 1000000 values a tool call takes')
  })

  it('a cycle is refused even past the ancestors it scans, and a shared subtree is copied, not refused', () => {
    const deep = nested(100) as Record<string, unknown>
    let leaf = deep
    while (typeof leaf.x === 'object') leaf = leaf.x as Record<string, unknown>
    leaf.y = (deep.x as Record<string, unknown>).x
    expect(() => snapshot(deep)).to.throw(JsonError, 'refers back to one of its own ancestors (a cycle)')
    const common = { k: 1 }
    expect(snapshot({ a: common, b: [common, common] })).to.deep.equal({ a: { k: 1 }, b: [{ k: 1 }, { k: 1 }] })
  })

  it('a snapshot taken inside a getter another snapshot is reading, failed or not, leaves the outer one whole', () => {
    const inner: string[] = []
    const value = {
      a: [1, 2],
      get b() {
        for (const attempt of [{ deep: [undefined] }, { fine: [3] }]) {
          try {
            inner.push(JSON.stringify(snapshot(attempt)))
          } catch (error) {
            inner.push((error as JsonError).path)
          }
        }
        return { c: [4] }
      },
      d: 5,
    }
    expect(snapshot(value)).to.deep.equal({ a: [1, 2], b: { c: [4] }, d: 5 })
    expect(inner).to.deep.equal(['$.deep[0]', '{"fine":[3]}'])
    expect(snapshot({ after: [] })).to.deep.equal({ after: [] })
  })

  it('a value fresh from JSON.parse is adopted as its snapshot: frozen in place, or the same copy or JsonError', () => {
    const before = pristine()
    const outcome = (take: () => Json) => {
      try {
        const value = take()
        return { json: JSON.stringify(value), frozen: isDeeplyFrozen(value) }
      } catch (error) {
        expect(error).to.be.instanceOf(JsonError)
        return { error: (error as JsonError).message }
      }
    }
    const texts = fc.oneof(
      json.map((value) => JSON.stringify(value)),
      fc.constantFrom('-0', '[1e999]', '{"a":[-0]}', '{"__proto__":{"x":1}}', '[[[]]]', '"text"', 'null'),
      fc.constant(`${'['.repeat(MAX_JSON_DEPTH + 1)}${']'.repeat(MAX_JSON_DEPTH + 1)}`),
      fc.constant(`${'['.repeat(MAX_JSON_DEPTH)}${']'.repeat(MAX_JSON_DEPTH)}`),
    )
    fc.assert(
      fc.property(texts, (text) => {
        const adopted = outcome(() => adoptParsed(JSON.parse(text)))
        expect(adopted).to.deep.equal(outcome(() => snapshot(JSON.parse(text))))
        if (!('error' in adopted)) expect(adopted.frozen).to.equal(true)
      }),
      { numRuns: 300 },
    )
    const text = '{"__proto__":{"x":1},"y":[1,2]}'
    const adopted = adoptParsed(JSON.parse(text)) as Record<string, unknown>
    expect(Object.getPrototypeOf(adopted)).to.equal(Object.prototype)
    expect(Object.keys(adopted)).to.deep.equal(['__proto__', 'y'])
    expect(pristine()).to.deep.equal(before)
  })

  it('a very long key is shown cut in the path', () => {
    const long = 'k'.repeat(100_000)
    expect(() => snapshot({ [long]: undefined }))
      .to.throw(JsonError)
      .with.property('path')
      .that.has.length.below(100)
  })
})

describe('execute never rejects for anything in arguments or results', () => {
  async function echoing(onExec?: (exec: Execution, args: unknown) => void) {
    const ctx = await deployment()
    ctx.tools.register({
      name: 'echo',
      description: 'returns its arguments',
      parameters: { type: 'object', additionalProperties: true },
      output: { schema: {} },
      execute: (args: unknown, run: { exec: Execution }) => {
        onExec?.(run.exec, args)
        return args
      },
    })
    return ctx
  }

  it('hostile arguments end as INVALID_ARGUMENTS or run with exactly the validated value', async () => {
    let mismatches = 0
    const ctx = await echoing((exec, args) => {
      if (exec.arguments !== args) mismatches++
    })
    const tools = ctx.tools
    await fc.assert(
      fc.asyncProperty(recipe, async (made) => {
        const result = await tools.execute({ callId: callId(), name: 'echo', arguments: { value: build(made) }, signal: signal() })
        expect(code(result)).to.be.oneOf(['OK', 'INVALID_ARGUMENTS'])
        if (result.isError) expect(result.error.message).to.match(/^arguments for "echo" are not JSON: \$\.value/)
      }),
      { numRuns: 300 },
    )
    expect(mismatches).to.equal(0)
  })

  it('a hostile return value ends as INVALID_OUTPUT', async () => {
    const ctx = await deployment()
    let returned: unknown
    ctx.tools.register({ name: 'give', description: 'returns whatever', parameters: { type: 'object' }, output: { schema: {} }, execute: () => returned })
    const tools = ctx.tools
    await fc.assert(
      fc.asyncProperty(recipe, async (made) => {
        fc.pre(!thenable(made))
        returned = build(made)
        const result = await tools.execute({ callId: callId(), name: 'give', arguments: {}, signal: signal() })
        expect(code(result)).to.be.oneOf(['OK', 'INVALID_OUTPUT'])
      }),
      { numRuns: 300 },
    )
  })

  it('deep, revoked, trapping and exponentially shared arguments each name what is wrong and where', async () => {
    const ctx = await echoing()
    const { proxy: revoked, revoke } = Proxy.revocable({}, {})
    revoke()
    const cases: [unknown, string][] = [
      [nested(8000), `arguments for "echo" are not JSON: $.x.x.x.x.x`],
      [nested(8000), `is nested deeper than ${MAX_JSON_DEPTH} levels, which is more than a tool call takes; pass a flatter value`],
      [{ p: revoked }, "$.p could not be read (Cannot perform 'IsArray' on a proxy that has been revoked)"],
      [{ p: new Proxy({}, { ownKeys: () => ['a', 'a'] }) }, "$.p could not be read ('ownKeys' on proxy: trap returned duplicate entries)"],
      [
        {
          p: new Proxy(
            { a: 1 },
            {
              get: () => ({
                get x() {
                  throw new Error('deeper')
                },
              }),
            },
          ),
        },
        '$.p.a.x could not be read: reading it threw (deeper)',
      ],
    ]
    for (const [args, message] of cases) {
      const result = await ctx.tools.execute({ callId: callId(), name: 'echo', arguments: args, signal: signal() })
      expect(code(result)).to.equal('INVALID_ARGUMENTS')
      expect(result.content).to.contain(message)
    }
  })

  it('a body that throws or returns something unreadable ends as a result', async () => {
    const ctx = await deployment()
    const { proxy: revoked, revoke } = Proxy.revocable({}, {})
    revoke()
    const outcomes: [() => unknown, string, string][] = [
      [() => revoked, 'INVALID_OUTPUT', '"odd" returned a value that could not be read'],
      [
        () => {
          throw revoked
        },
        'TOOL_FAILED',
        '"odd" failed: an error that could not be shown',
      ],
      [
        () => {
          throw { code: 'E_ODD', toString: () => 'odd thing' }
        },
        'TOOL_FAILED',
        '"odd" failed: E_ODD: odd thing',
      ],
      [() => Promise.reject(Object.create(null)), 'TOOL_FAILED', '"odd" failed: an error that could not be shown'],
    ]
    let body = outcomes[0][0]
    ctx.tools.register({ name: 'odd', description: '', parameters: { type: 'object' }, output: { schema: {} }, execute: () => body() })
    for (const [make, expected, message] of outcomes) {
      body = make
      const result = await ctx.tools.execute({ callId: callId(), name: 'odd', arguments: {}, signal: signal() })
      expect(result.isError && result.error).to.deep.include({ code: expected })
      expect(result.content).to.contain(message)
    }
  })

  it('a ToolResultError carrying anything but an error result is the body failing, not a result taken as it is', async () => {
    const ctx = await deployment()
    const carrying = (result: unknown) => {
      const error = new ToolResultError(errorResult('TOOL_FAILED', 'made up'))
      Object.defineProperty(error, 'result', { get: () => result })
      return error
    }
    const carried: [string, unknown][] = [
      // a success, which would skip the output schema and the snapshot: the value holds a BigInt
      ['a success', { isError: false, value: { unchecked: 1n }, content: 'looks fine' }],
      ['null', null],
      ['a code no result has, and content that is not text', { isError: true, error: { code: 'NOPE', message: 5 }, content: 7 }],
      [
        'a proxy whose traps throw',
        new Proxy(
          {},
          {
            get: () => {
              throw new Error('trap')
            },
          },
        ),
      ],
    ]
    let thrown: unknown
    ctx.tools.register(
      defineTool({
        name: 'forger',
        description: 'throws what it is given',
        parameters: t.object({}),
        output: { schema: t.object({ ok: t.boolean() }) },
        execute: () => {
          throw thrown
        },
      }),
    )
    for (const [what, result] of carried) {
      thrown = carrying(result)
      const outcome = await ctx.tools.execute({ callId: callId(), name: 'forger', arguments: {}, signal: signal() })
      expect(outcome.isError && outcome.error.code, what).to.equal('TOOL_FAILED')
      expect(outcome.content, what).to.contain('"forger" failed: it threw a ToolResultError that carries no error result')
    }
    // a real one still answers with its own result, copied: changing the thrown one afterwards changes nothing
    const own = errorResult('TOOL_FAILED', 'disk full', { toolCode: 'ENOSPC' })
    thrown = new ToolResultError(own)
    const outcome = await ctx.tools.execute({ callId: callId(), name: 'forger', arguments: {}, signal: signal() })
    ;(own.error as { message: string }).message = 'changed later'
    expect(outcome.isError && outcome.error).to.deep.include({ code: 'TOOL_FAILED', message: 'disk full', toolCode: 'ENOSPC' })
    expect(outcome.content).to.equal('Error: disk full')
  })
})

describe('execute never rejects for what a policy participant answers', () => {
  const revoked = () => {
    const { proxy, revoke } = Proxy.revocable({}, {})
    revoke()
    return proxy
  }
  const answers: [string, () => unknown][] = [
    ['a revoked proxy', revoked],
    [
      'a proxy whose traps throw',
      () =>
        new Proxy(
          {},
          {
            get: () => {
              throw new Error('trap')
            },
            has: () => {
              throw new Error('trap')
            },
          },
        ),
    ],
    [
      'a proxy that throws on anything but then',
      () =>
        new Proxy(
          {},
          {
            get: (_, name) => {
              if (name === 'then') return undefined
              throw new Error('trap')
            },
          },
        ),
    ],
    [
      'a getter that throws',
      () => ({
        get kind(): string {
          throw new Error('getter')
        },
      }),
    ],
    ['a decision that is not JSON', () => ({ kind: 'sideways', big: 1n })],
    [
      'a cycle',
      () => {
        const a: Record<string, unknown> = { kind: 'sideways' }
        a.self = a
        return a
      },
    ],
  ]

  for (const [what, make] of answers) {
    it(`${what} from a pre-execute listener, a tools/execute wrapper, a post-execute listener or a guard fails closed`, async () => {
      for (const stage of ['tools/pre-execute', 'tools/execute', 'tools/post-execute', 'guard'] as const) {
        const ctx = await deployment()
        let ran = 0
        ctx.tools.register({ name: 'touch', description: 'counts', parameters: { type: 'object' }, output: { schema: {} }, execute: () => ++ran })
        if (stage === 'guard') ctx.tools.guard(() => make() as string)
        else ctx.on(stage, () => make() as never)
        const result = await ctx.tools.execute({ callId: callId(), name: 'touch', arguments: {}, signal: signal() })
        // after the body ran (a post-execute listener) the result is withheld, and the model told the tool ran
        expect(code(result), `${what} at ${stage}`).to.equal(stage === 'tools/post-execute' ? 'RESULT_WITHHELD' : 'DENIED')
        if (stage === 'tools/pre-execute' || stage === 'guard') expect(ran, `${what} at ${stage}`).to.equal(0)
        await ctx.stop()
      }
    })
  }
})

describe('keys are data', () => {
  const PAYLOAD = '{"__proto__":{"path":"/etc/passwd"},"constructor":{"prototype":{"polluted":true}}}'

  it('__proto__ is an own key, refused by additionalProperties: false', async () => {
    const ctx = await deployment()
    let ran = 0
    ctx.tools.register(
      defineTool({
        name: 'read',
        description: 'reads a file under the workspace',
        parameters: t.object({ path: t.string({ pattern: '^[a-z]+$' }).optional() }),
        output: { schema: t.string() },
        execute: () => String(++ran),
      }),
    )
    const result = await ctx.tools.execute({ callId: callId(), name: 'read', arguments: JSON.parse(PAYLOAD), signal: signal() })
    expect(result.isError && result.error.message).to.equal(
      'invalid arguments for "read": $: unexpected property "__proto__" (allowed: path). Fix the arguments and call again.',
    )
    expect(ran).to.equal(0)
  })

  it('the body receives exactly what was validated: the keys as own properties, the prototype untouched', async () => {
    const ctx = await deployment()
    const seen: unknown[] = []
    ctx.tools.register(
      defineTool({
        name: 'keys',
        description: 'tells what it received',
        parameters: t.record(t.unknown()),
        output: { schema: t.unknown() },
        execute: (args) => {
          seen.push(args)
          return { keys: Object.keys(args), path: args.path ?? null, plain: Object.getPrototypeOf(args) === Object.prototype }
        },
      }),
    )
    const result = await ctx.tools.execute({ callId: callId(), name: 'keys', arguments: JSON.parse(PAYLOAD), signal: signal() })
    expect(result).to.deep.include({ isError: false, value: { keys: ['__proto__', 'constructor'], path: null, plain: true } })
    expect(JSON.stringify(seen[0])).to.equal(PAYLOAD)
    expect(({} as Record<string, unknown>).polluted).to.equal(undefined)
  })

  it('__proto__, constructor and prototype are validated like any property: pattern, required, additionalProperties', async () => {
    const ctx = await deployment()
    ctx.tools.register(
      defineTool({
        name: 'odd',
        description: 'takes oddly named properties',
        parameters: t.object({ ['__proto__']: t.string({ pattern: '^[a-z]+$' }), constructor: t.integer(), prototype: t.boolean().optional() }),
        output: { schema: t.unknown() },
        execute: (args) => args,
      }),
    )
    const run = (text: string) => ctx.tools.execute({ callId: callId(), name: 'odd', arguments: JSON.parse(text), signal: signal() })
    expect(await run('{"__proto__":"abc","constructor":1}')).to.deep.include({ isError: false, value: JSON.parse('{"__proto__":"abc","constructor":1}') })
    expect((await run('{"__proto__":"/etc","constructor":1}')).content).to.contain('$.__proto__: expected a string matching /^[a-z]+$/')
    expect((await run('{"constructor":1}')).content).to.contain('missing required property "__proto__"')
    expect((await run('{"__proto__":"a","constructor":1,"prototype":"x"}')).content).to.contain('$.prototype: expected boolean, got string')
    expect((await run('{"__proto__":"a","constructor":1,"toString":1}')).content).to.contain('unexpected property "toString"')
    expect(Object.keys(ctx.tools.schemas().find((s) => s.name === 'odd')?.parameters.properties ?? {})).to.deep.equal(['__proto__', 'constructor', 'prototype'])
  })

  it('a result keeps its own __proto__ key through validation and rendering', async () => {
    const ctx = await deployment()
    ctx.tools.register({
      name: 'give',
      description: 'returns a payload',
      parameters: { type: 'object' },
      output: { schema: {} },
      execute: () => JSON.parse(PAYLOAD),
    })
    const result = await ctx.tools.execute({ callId: callId(), name: 'give', arguments: {}, signal: signal() })
    expect(result.isError).to.equal(false)
    expect(JSON.stringify(!result.isError && result.value)).to.equal(PAYLOAD)
    expect(JSON.parse(result.content)).to.deep.equal(JSON.parse(PAYLOAD))
  })
})

describe('schemas are bounded', () => {
  it('a schema nested past the limit, or containing itself, is refused at registration with a message', async () => {
    const ctx = await deployment()
    let deep: Record<string, unknown> = { type: 'string' }
    for (let i = 0; i < 100; i++) deep = { type: 'array', items: deep }
    const selfish: Record<string, unknown> = { type: 'object' }
    selfish.properties = { again: selfish }
    for (const parameters of [{ type: 'object', properties: { deep } }, selfish]) {
      expect(() => ctx.tools.register({ name: 'bad', description: '', parameters: parameters as never, output: { schema: {} }, execute: () => null })).to.throw(
        TypeError,
        'schemas nest deeper than 64 levels (or one contains itself); flatten it',
      )
    }
  })

  it('const and enum must be JSON', async () => {
    const ctx = await deployment()
    const cyclic: unknown[] = []
    cyclic.push(cyclic)
    expect(() =>
      ctx.tools.register({
        name: 'bad',
        description: '',
        parameters: { type: 'object', properties: { a: { enum: [cyclic] } } },
        output: { schema: {} },
        execute: () => null,
      }),
    ).to.throw(TypeError, '"enum" must be JSON: parameters.properties.a.enum[0][0] refers back to one of its own ancestors')
  })

  it('a megabyte string is measured and shown without being copied whole', async () => {
    const ctx = await deployment()
    ctx.tools.register(
      defineTool({
        name: 'short',
        description: '',
        parameters: t.object({ s: t.string({ maxLength: 4 }) }),
        output: { schema: t.unknown() },
        execute: () => null,
      }),
    )
    const result = await ctx.tools.execute({ callId: callId(), name: 'short', arguments: { s: '😀'.repeat(1_000_000) }, signal: signal() })
    expect(result.content).to.contain('$.s: expected at most 4 characters, got 1000000')
  })
})

describe('the run_code bridge cannot crash the host', () => {
  function bridgeReplies(ctx: Context, script: (call: (name: string, json: string) => Promise<BridgeReply>) => Promise<unknown>) {
    const runtime = new ScriptedCodeRuntime((request) => script((name, json) => request.call(name, json)))
    ctx.set('codeRuntime', runtime)
    return runtime
  }

  const echo = defineTool({
    name: 'echo',
    description: 'returns its arguments',
    parameters: t.record(t.unknown()),
    output: { schema: t.unknown() },
    execute: (args) => args,
  })

  it('a nested call whose agent was disposed mid-run answers the program with a failure; nothing is left unhandled', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register(echo)
    let agent!: ReturnType<typeof createAgent>
    const fork = ctx.plugin({ name: 'owner', inject: ['tools'], apply: (ctx: Context) => void (agent = createAgent(ctx, { name: 'doomed' })) })
    const replies: unknown[] = []
    bridgeReplies(ctx, async (call) => {
      replies.push(await call('echo', '{"a":1}'))
      fork.dispose()
      replies.push(await call('echo', '{"a":2}'))
      return 'done'
    })
    const watch = watchRejections()
    const result = await ctx.tools.execute({ callId: callId(), name: 'run_code', agent, arguments: { code: 'x', description: 'd' }, signal: signal() })
    expect(await watch.stop()).to.deep.equal([])
    expect(code(result)).to.equal('OK')
    expect(replies[0]).to.deep.equal({ ok: true, value: '{"a":1}' })
    expect(replies[1]).to.deep.include({ ok: false })
    expect((replies[1] as { message: string }).message).to.match(/^tools\.echo failed on the host: .*has been disposed/)
  })

  it('a nested argument 8,000 levels deep is INVALID_ARGUMENTS for the program, and the host goes on', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register(echo)
    const replies: BridgeReply[] = []
    bridgeReplies(ctx, async (call) => {
      replies.push(await call('echo', `${'{"x":'.repeat(8000)}0${'}'.repeat(8000)}`))
      replies.push(await call('echo', '{"fine":true}'))
    })
    const watch = watchRejections()
    const result = await ctx.tools.execute({ callId: callId(), name: 'run_code', arguments: { code: 'x', description: 'd' }, signal: signal() })
    expect(await watch.stop()).to.deep.equal([])
    expect(code(result)).to.equal('OK')
    const [first, second] = replies
    expect(first).to.deep.include({ ok: false, code: 'INVALID_ARGUMENTS' })
    expect(first.ok === false && first.message).to.contain(`nested deeper than ${MAX_JSON_DEPTH} levels`)
    expect(second).to.deep.equal({ ok: true, value: '{"fine":true}' })
  })

  it("a program's many calls at once do not make the host print a listener warning", async () => {
    const ctx = await deployment({ mode: 'code', maxParallelSubCalls: 64 })
    // a body that listens on its signal, as a cancellable tool does
    ctx.tools.register(
      defineTool({
        name: 'hold',
        description: 'waits for its signal or the program',
        parameters: t.object({}),
        output: { schema: t.unknown() },
        isConcurrencySafe: () => true,
        execute: (_, run) => new Promise((resolve) => run.signal.addEventListener('abort', () => resolve('aborted'))),
      }),
    )
    bridgeReplies(ctx, async (call) => {
      for (let i = 0; i < 40; i++) void call('hold', '{}')
      return 'left them'
    })
    const warnings: string[] = []
    const onWarning = (warning: Error) => void warnings.push(`${warning.name}: ${warning.message}`)
    process.on('warning', onWarning)
    try {
      const result = await ctx.tools.execute({ callId: callId(), name: 'run_code', arguments: { code: 'x', description: 'd' }, signal: signal() })
      expect(result.isError ? result.error.message : result.value).to.deep.include({ result: 'left them' })
      // a warning is emitted on the next tick
      await new Promise((resolve) => setImmediate(resolve))
    } finally {
      process.off('warning', onWarning)
    }
    expect(warnings).to.deep.equal([])
  })

  it('the host answers $search and $describe in time bounded by the tools, not by what the program sends', async () => {
    const ctx = await deployment({ mode: 'code' })
    // enough tools that a comparison of each with a megabyte name (the nearest names of a missing one) takes minutes
    for (let i = 0; i < 60; i++) ctx.tools.register(echoTool(`tool_number_${i}`))
    const replies: BridgeReply[] = []
    bridgeReplies(ctx, async (call) => {
      replies.push(await call('$describe', JSON.stringify(['tool_numbr_1', 'q'.repeat(2_000_000)])))
      replies.push(await call('$describe', JSON.stringify(Array.from({ length: 101 }, (_, i) => `tool_number_${i % 60}`))))
      replies.push(await call('$search', JSON.stringify([Array.from({ length: 100_000 }, (_, i) => `w${i}`).join(' ')])))
      replies.push(await call('$search', JSON.stringify(['number 7', 1])))
    })
    const result = await ctx.tools.execute({ callId: callId(), name: 'run_code', arguments: { code: 'x', description: 'd' }, signal: signal() })
    expect(code(result)).to.equal('OK')
    const [missing, many, long, found] = replies
    expect(missing).to.deep.include({ ok: false, code: 'UNKNOWN_TOOL' })
    expect(missing.ok === false && missing.message).to.match(/^tools\.\$describe: `tool_numbr_1` is not a tool; did you mean `tool_number_1`/)
    expect(many).to.deep.include({ ok: false, code: 'INVALID_ARGUMENTS' })
    expect(many.ok === false && many.message).to.contain('at most 100 tools at a time')
    expect(long).to.deep.include({ ok: false, code: 'INVALID_ARGUMENTS' })
    expect(long.ok === false && long.message).to.contain('a query of at most 1000 characters')
    expect(found).to.deep.equal({ ok: true, value: JSON.stringify([{ name: 'tool_number_7', summary: 'echoes its text (tool_number_7)' }]) })
  })

  it('an async code/call-start or code/call-settle observer that rejects is logged, never left unhandled', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register(echo)
    for (const event of ['code/call-start', 'code/call-settle'] as const) {
      ctx.on(event, async () => {
        throw new Error(`${event} observer broke`)
      })
    }
    bridgeReplies(ctx, async (call) => [await call('echo', '{"a":1}'), await call('echo', '{"a":2}')])
    const watch = watchRejections()
    const result = await ctx.tools.execute({ callId: callId(), name: 'run_code', arguments: { code: 'x', description: 'd' }, signal: signal() })
    expect(await watch.stop()).to.deep.equal([])
    expect(!result.isError && result.value).to.deep.include({
      result: [
        { ok: true, value: '{"a":1}' },
        { ok: true, value: '{"a":2}' },
      ],
    })
  })

  it('whatever the sandbox hands the bridge, it answers; keys cross as data', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register(echo)
    const replies: unknown[] = []
    bridgeReplies(ctx, async (call) => {
      for (const [name, json] of [
        [Symbol('x'), '{}'],
        ['echo', { toString: () => '{}' }],
        ['echo', 'not json'],
        ['missing', '{}'],
        ['echo', '{"__proto__":{"path":"/etc/passwd"}}'],
      ] as [never, never][]) {
        replies.push(await call(name, json))
      }
    })
    const watch = watchRejections()
    const result = await ctx.tools.execute({ callId: callId(), name: 'run_code', arguments: { code: 'x', description: 'd' }, signal: signal() })
    expect(await watch.stop()).to.deep.equal([])
    expect(code(result)).to.equal('OK')
    expect(replies.slice(0, 4).map((r) => (r as { ok: boolean }).ok)).to.deep.equal([false, false, false, false])
    expect(replies[4]).to.deep.equal({ ok: true, value: '{"__proto__":{"path":"/etc/passwd"}}' })
  })
})
