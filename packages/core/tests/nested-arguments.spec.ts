// a nested call's argument text, whatever a program (or a sandbox that cannot be trusted) sends, reaches the tool as
// JSON.parse reads it, as a snapshot keeps it: the same keys in the same order, the same values, the same prototypes;
// text that JSON.parse refuses is refused, and so is a value that is no JSON (a number too large to be finite)

import { type BridgeReply, defineTool, type Json, t } from '@faber/core'
import { callId, deployment, disposeAll, signal } from '@faber/core/testing'
import { expect } from 'chai'
import fc from 'fast-check'
import { ScriptedCodeRuntime } from './helpers.ts'

// keys an object literal or an assignment would treat differently from JSON.parse, and keys that only look odd
const KEYS = ['a', 'i', '', '__proto__', 'constructor', 'toString', 'hasOwnProperty', '0', '01', '4294967295', '-1', 'a b', 'é', '\u2028', '\ud800', '😀']
// value texts, valid and not: integers at the edges of what is read exactly, -0, fractions, exponents, escapes, raw
// control characters, literals cut short, nesting
const VALUES = [
  '0',
  '-0',
  '7',
  '-12',
  '00',
  '01',
  '-',
  '--1',
  '123456789012345',
  '-999999999999999',
  '1234567890123456',
  '9007199254740993',
  '123456789012345678901234567890',
  '1e400',
  '1.5',
  '1e5',
  '1E-2',
  '2.',
  'true',
  'false',
  'null',
  'tru',
  'nul',
  'falsey',
  '""',
  '"plain"',
  '"a\\nb"',
  '"\\u0041"',
  '"\u0001"',
  '"\\"',
  '"é😀\ud800"',
  '"}"',
  '[]',
  '[1,{"a":-0}]',
  '{}',
  '{"x":1}',
  'NaN',
  'undefined',
]
const SEPARATORS = [',', ',', ',', ', ', ',,', '']

// a flat object of scalars in JSON.stringify's form: keys, integers and strings as they come from the prelude
const flat = fc
  .array(
    fc.tuple(
      fc.constantFrom(...KEYS),
      fc.oneof(
        fc.constantFrom(...VALUES.slice(0, 32)),
        fc.integer().map(String),
        fc.string().map((s) => JSON.stringify(s)),
      ),
    ),
    {
      maxLength: 6,
    },
  )
  .map((members) => `{${members.map(([key, value]) => `${JSON.stringify(key)}:${value}`).join(',')}}`)

const text = fc.oneof(
  flat,
  fc.array(fc.tuple(fc.constantFrom(...KEYS), fc.constantFrom(...VALUES), fc.constantFrom(...SEPARATORS)), { maxLength: 5 }).chain((members) =>
    fc.tuple(fc.constantFrom('{', '{ ', '[', ''), fc.constantFrom('}', ' }', '},', '')).map(([open, close]) => {
      const body = members.map(([key, value, separator], i) => `${JSON.stringify(key)}:${value}${i < members.length - 1 ? separator : ''}`).join('')
      return `${open}${body}${close}`
    }),
  ),
  fc.constantFrom('', '{', '}', '{}', '{"a"}', '{"a":}', '{"a":1,}', '{"a" :1}', '5', '"s"', '[1]', 'null', '{"a":1}x', '{"a\\":1}', '{"\u0000":1}'),
  fc.string({ maxLength: 12 }).map((s) => `{"a":${s}}`),
)

// equal as JSON.parse makes them: same own keys in the same order, same prototypes, numbers compared with Object.is
function same(a: unknown, b: unknown): boolean {
  if (typeof a !== 'object' || a === null || typeof b !== 'object' || b === null) return Object.is(a, b)
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false
  const keys = Object.keys(a)
  if (JSON.stringify(keys) !== JSON.stringify(Object.keys(b))) return false
  return keys.every((key) => same((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key]))
}

// what a snapshot makes of JSON.parse's value: -0 (which has no JSON spelling) is 0, and a number that is not finite is
// no JSON (undefined)
function snapshotOf(value: unknown): unknown {
  if (typeof value === 'number') return Number.isFinite(value) ? (value === 0 ? 0 : value) : undefined
  if (typeof value !== 'object' || value === null) return value
  const copy: object = Array.isArray(value) ? [] : {}
  for (const [key, item] of Object.entries(value)) {
    const kept = snapshotOf(item)
    if (kept === undefined) return undefined
    Object.defineProperty(copy, key, { value: kept, enumerable: true })
  }
  return copy
}

describe("a nested call's argument text", () => {
  afterEach(disposeAll)

  it('reaches the tool as JSON.parse reads it, and is refused where JSON.parse refuses it', async () => {
    const ctx = await deployment({ mode: 'code' })
    const received: unknown[] = []
    ctx.tools.register(
      defineTool({
        name: 'take',
        description: 'takes any object',
        parameters: t.object({}, { additionalProperties: true }),
        output: { schema: t.null() },
        execute: (args) => {
          received.push(args)
          return null
        },
      }),
    )
    const texts = fc.sample(text, { numRuns: 3000, seed: 15 })
    const replies: BridgeReply[] = []
    ctx.set(
      'codeRuntime',
      new ScriptedCodeRuntime(async (request) => {
        for (const text of texts) replies.push(await request.call('take', text))
      }),
    )
    const result = await ctx.tools.execute({ callId: callId(), name: 'run_code', arguments: { code: 'x', description: 'texts' }, signal: signal() })
    expect(result.isError).to.equal(false)
    const kinds = { parsed: 0, refused: 0, notJson: 0 }
    texts.forEach((text, i) => {
      const reply = replies[i]
      let expected: unknown
      try {
        expected = JSON.parse(text)
      } catch {
        expect(reply, text).to.deep.include({ ok: false, code: 'INVALID_ARGUMENTS' })
        expect((reply as { message: string }).message, text).to.contain('the argument did not arrive as JSON')
        kinds.notJson++
        return
      }
      expected = snapshotOf(expected)
      if (typeof expected === 'object' && expected !== null && !Array.isArray(expected)) {
        expect(reply, text).to.deep.equal({ ok: true, value: 'null' })
        const args = received.shift()
        expect(same(args, expected), `${text} reached the tool as ${JSON.stringify(args as Json)}`).to.equal(true)
        kinds.parsed++
      } else {
        expect(reply, text).to.deep.include({ ok: false, code: 'INVALID_ARGUMENTS' })
        kinds.refused++
      }
    })
    expect(received).to.deep.equal([])
    // the sample reaches each way out
    expect(kinds.parsed).to.be.greaterThan(100)
    expect(kinds.refused).to.be.greaterThan(10)
    expect(kinds.notJson).to.be.greaterThan(100)
  })
})
