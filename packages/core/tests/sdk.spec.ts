import { expect } from 'chai'
import fc from 'fast-check'
import ts from 'typescript'
import type { JsonSchema } from '../src/schema.ts'
import { describeTools, renderSdk, type SdkTool, schemaToTs, sdkUsage } from '../src/sdk.ts'

const options: ts.CompilerOptions = {
  strict: true,
  noEmit: true,
  target: ts.ScriptTarget.ES2022,
  lib: ['lib.es2022.d.ts'],
  types: [],
  skipLibCheck: true,
}
const realHost = ts.createCompilerHost(options)
// the standard library parses once for the whole file; each check then costs only the checker
const libCache = new Map<string, ts.SourceFile | undefined>()

/** diagnostics for the SDK plus a program body, compiled as the model's code would be */
function check(sdk: string, body = ''): string[] {
  const files = new Map([
    ['/sdk.ts', sdk],
    ['/program.ts', `declare const console: { log(...values: unknown[]): void }\nasync function main() {\n${body}\n}\nmain()\n`],
  ])
  const host: ts.CompilerHost = {
    ...realHost,
    fileExists: (name) => files.has(name) || realHost.fileExists(name),
    readFile: (name) => files.get(name) ?? realHost.readFile(name),
    getSourceFile(name, language) {
      const text = files.get(name)
      if (text !== undefined) return ts.createSourceFile(name, text, language)
      if (!libCache.has(name)) libCache.set(name, realHost.getSourceFile(name, language))
      return libCache.get(name)
    },
  }
  const program = ts.createProgram(['/sdk.ts', '/program.ts'], options, host)
  return ts.getPreEmitDiagnostics(program).map((d) => `${d.file?.fileName ?? ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`)
}

function tool(name: string, parameters: JsonSchema = { type: 'object', properties: {} }, output: JsonSchema = {}, description = ''): SdkTool {
  return { name, description, parameters, output }
}

function shuffle<T>(items: readonly T[], seed: number): T[] {
  const result = [...items]
  for (let i = result.length - 1; i > 0; i--) {
    seed = (seed * 1103515245 + 12345) % 2147483648
    const j = seed % (i + 1)
    ;[result[i], result[j]] = [result[j], result[i]]
  }
  return result
}

const varied: SdkTool[] = [
  tool(
    'read',
    {
      type: 'object',
      properties: {
        path: { type: 'string', description: 'file to read' },
        limit: { type: 'integer', minimum: 1 },
        encoding: { enum: ['utf8', 'base64'] },
      },
      required: ['path'],
      additionalProperties: false,
    },
    { type: 'object', properties: { text: { type: 'string' }, truncated: { type: 'boolean' } }, required: ['text', 'truncated'] },
    'Read a file.\n\nReturns its text.',
  ),
  tool('list-dir', { type: 'object', properties: { path: { type: 'string' } } }, { type: 'array', items: { type: 'string' } }, 'List a directory'),
  tool('list_dir', { type: 'object', additionalProperties: false }, { type: 'array', items: { anyOf: [{ type: 'string' }, { type: 'null' }] } }),
  tool(
    'fs.stat',
    { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    { type: ['object', 'null'], properties: { size: { type: 'number' } } },
  ),
  tool('2fa:code', { type: 'object', properties: {} }, { const: 'ok' }),
  tool('new', { type: 'object', properties: { 'content-type': { type: 'string' } } }, { type: 'null' }),
  tool(
    'env',
    { type: 'object', properties: { name: { type: 'string' } }, additionalProperties: { type: 'number' } },
    { type: 'object', additionalProperties: { type: 'object', properties: { value: { type: 'string' } } } },
  ),
  tool('search', {
    type: 'object',
    properties: {
      query: { oneOf: [{ type: 'string' }, { type: 'object', properties: { regex: { type: 'string' } }, required: ['regex'] }] },
      filters: { type: 'array', items: { type: 'object', properties: { field: { type: 'string' }, op: { enum: ['=', '!='] } }, required: ['field'] } },
    },
    required: ['query'],
  }),
  tool('garbage', { $ref: '#/definitions/x' } as JsonSchema, null as unknown as JsonSchema),
  tool('run_code', { type: 'object', properties: { code: { type: 'string' } }, required: ['code'] }),
]

describe('schemaToTs', () => {
  it('maps primitive types', () => {
    expect(schemaToTs({ type: 'string' })).to.equal('string')
    expect(schemaToTs({ type: 'number' })).to.equal('number')
    expect(schemaToTs({ type: 'integer' })).to.equal('number')
    expect(schemaToTs({ type: 'boolean' })).to.equal('boolean')
    expect(schemaToTs({ type: 'null' })).to.equal('null')
  })

  it('renders a type array as a union, once per distinct type', () => {
    expect(schemaToTs({ type: ['string', 'null'] })).to.equal('string | null')
    expect(schemaToTs({ type: ['integer', 'number'] })).to.equal('number')
  })

  it('renders enum and const as literal unions', () => {
    expect(schemaToTs({ enum: ['a', 'b"c', 1, true, null] })).to.equal('"a" | "b\\"c" | 1 | true | null')
    expect(schemaToTs({ type: 'string', const: 'x' })).to.equal('"x"')
    expect(schemaToTs({ const: -2.5 })).to.equal('-2.5')
    expect(schemaToTs({ enum: [] })).to.equal('never')
  })

  it('renders anyOf and oneOf as unions', () => {
    expect(schemaToTs({ anyOf: [{ type: 'string' }, { type: 'number' }] })).to.equal('string | number')
    expect(schemaToTs({ oneOf: [{ const: 1 }, { const: 2 }] })).to.equal('1 | 2')
    expect(schemaToTs({ anyOf: [{ type: 'string' }, {}] })).to.equal('unknown')
  })

  it('intersects sibling keywords with a union', () => {
    const schema: JsonSchema = {
      type: 'object',
      properties: { a: { type: 'string' } },
      oneOf: [{ type: 'object', properties: { b: { type: 'number' } } }, { type: 'null' }],
    }
    expect(schemaToTs(schema)).to.equal('{ a?: string } & ({ b?: number } | null)')
  })

  it('renders arrays, parenthesizing unions', () => {
    expect(schemaToTs({ type: 'array', items: { type: 'string' } })).to.equal('string[]')
    expect(schemaToTs({ type: 'array', items: { type: ['string', 'number'] } })).to.equal('(string | number)[]')
    expect(schemaToTs({ type: 'array', items: { type: 'array', items: { enum: ['a'] } } })).to.equal('"a"[][]')
    expect(schemaToTs({ type: 'array' })).to.equal('unknown[]')
  })

  it('renders objects with optional, quoted and described properties', () => {
    const schema: JsonSchema = {
      type: 'object',
      properties: {
        path: { type: 'string', description: 'the\n  path */ here' },
        'max-lines': { type: 'integer' },
        nested: { type: 'object', properties: { deep: { type: 'boolean' } }, required: ['deep'] },
      },
      required: ['path'],
    }
    expect(schemaToTs(schema)).to.equal(['{', '  path: string // the path */ here', '  "max-lines"?: number', '  nested?: { deep: boolean }', '}'].join('\n'))
  })

  it('keeps properties in declaration order', () => {
    const text = schemaToTs({ type: 'object', properties: { z: { type: 'string' }, a: { type: 'string' } } })
    expect(text.indexOf('z?')).to.be.lessThan(text.indexOf('a?'))
  })

  it('renders open, closed and record objects', () => {
    expect(schemaToTs({ type: 'object' })).to.equal('Record<string, unknown>')
    expect(schemaToTs({ type: 'object', additionalProperties: false })).to.equal('Record<string, never>')
    expect(schemaToTs({ type: 'object', additionalProperties: { type: 'number' } })).to.equal('{ [key: string]: number }')
    expect(schemaToTs({ properties: { a: { type: 'string' } }, required: ['a'], additionalProperties: true })).to.equal('{ a: string; [key: string]: unknown }')
  })

  it('widens an index signature to cover the named properties', () => {
    const schema: JsonSchema = {
      type: 'object',
      properties: { a: { type: 'string' }, b: { type: 'number' } },
      required: ['b'],
      additionalProperties: { type: 'boolean' },
    }
    expect(schemaToTs(schema)).to.equal('{ a?: string; b: number; [key: string]: boolean | string | number | undefined }')
  })

  it('indents nested objects by two spaces from the given indent', () => {
    const text = schemaToTs({ type: 'object', properties: { a: { type: 'object', properties: { b: { type: 'string', description: 'bee' } } } } }, '    ')
    expect(text).to.equal('{\n      a?: {\n        b?: string // bee\n      }\n    }')
  })

  it('puts a small object without comments on one line', () => {
    expect(schemaToTs({ type: 'object', properties: { a: { type: 'string' }, b: { type: 'number' } }, required: ['a'] })).to.equal('{ a: string; b?: number }')
    const wide = schemaToTs({
      type: 'object',
      properties: { a: { type: 'string' }, b: { type: 'string' }, c: { type: 'string' }, d: { type: 'string' }, e: { type: 'string' } },
    })
    expect(wide.split('\n')).to.have.length(7)
  })

  it('shows constraints as doc tags and keeps descriptions whole', () => {
    const long = `${'word '.repeat(80)}end`
    const text = schemaToTs({
      type: 'object',
      properties: {
        n: { type: 'integer', description: long, minimum: 1, maximum: 9, default: 3 },
        s: { type: 'string', pattern: '^a+$', format: 'uri', minLength: 2 },
        l: { type: 'array', items: { type: 'string' }, minItems: 1, uniqueItems: true },
      },
    })
    expect(text).to.include(`  n?: number // ${long} @default 3 @minimum 1 @maximum 9\n`)
    expect(text).to.include('  s?: string // @minLength 2 @pattern ^a+$ @format uri\n')
    expect(text).to.include('  l?: string[] // @minItems 1 @uniqueItems\n')
    // a property whose type spans lines gets its comment on the line before
    const nested = schemaToTs({
      type: 'object',
      properties: { o: { type: 'object', description: 'inner', properties: { a: { type: 'string', description: 'x' } } } },
    })
    expect(nested).to.equal('{\n  // inner\n  o?: {\n    a?: string // x\n  }\n}')
  })

  it('renders no type and no keywords as unknown', () => {
    expect(schemaToTs({})).to.equal('unknown')
    expect(schemaToTs({ description: 'anything' })).to.equal('unknown')
  })

  it('never throws on garbage, rendering it as unknown', () => {
    const cyclic: Record<string, unknown> = { type: 'object', properties: {} }
    ;(cyclic.properties as Record<string, unknown>).self = cyclic
    const throwing = {
      get type(): never {
        throw new Error('boom')
      },
    }
    const garbage: unknown[] = [
      null,
      undefined,
      42,
      'string',
      [],
      { $ref: '#/x' },
      { allOf: [{ type: 'string' }] },
      { type: 'date' },
      { type: [] },
      { type: 7 },
      { anyOf: [] },
      { anyOf: { type: 'string' } },
      { enum: 'a' },
      { type: 'object', properties: [] },
      { type: 'object', required: 'a' },
      { type: 'object', additionalProperties: 'yes' },
      throwing,
    ]
    for (const [i, schema] of garbage.entries()) expect(schemaToTs(schema as JsonSchema), `garbage[${i}]`).to.equal('unknown')
    expect(schemaToTs(cyclic as JsonSchema)).to.equal('{ self?: unknown }')
    let deep: JsonSchema = { type: 'string' }
    for (let i = 0; i < 10_000; i++) deep = { type: 'array', items: deep }
    expect(schemaToTs(deep)).to.match(/^unknown(\[\])+$/)
  })

  it('never throws on any JSON value', () => {
    fc.assert(
      fc.property(fc.anything(), (value) => {
        expect(schemaToTs(value as JsonSchema)).to.be.a('string')
      }),
    )
  })
})

describe('renderSdk', () => {
  it('declares ToolCallError, the helpers and the tools, types where they are used', () => {
    const sdk = renderSdk([tool('read', { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }, { type: 'string' }, 'Read a file')])
    expect(sdk).to.equal(
      [
        'declare class ToolCallError extends Error { toolName: string; code?: string }',
        '',
        'declare const tools: {',
        '  $search(query: string, limit?: number): Promise<{ name: string; summary: string }[]>',
        '  $describe(...names: string[]): Promise<string>',
        '  // Read a file',
        '  read(args: { path: string }): Promise<string>',
        '}',
        '',
      ].join('\n'),
    )
  })

  it('declares a property documented the same way in several tools once, as an alias that keeps its comment', () => {
    const where = 'a path relative to the workspace root (an absolute path must lie inside the root)'
    const withPath = (name: string, required: boolean) =>
      tool(
        name,
        {
          type: 'object',
          properties: { path: { type: 'string', description: where }, n: { type: 'number', description: 'n' } },
          required: required ? ['path'] : [],
        },
        { type: 'object', properties: { path: { type: 'string', description: where } } },
        name,
      )
    const sdk = renderSdk([withPath('read', true), withPath('list', false), withPath('stat', true)])
    expect(sdk.split(where)).to.have.length(2)
    expect(sdk).to.include(`type Path = string // ${where}\n`)
    expect(sdk)
      .to.match(/ path: Path\n/)
      .and.match(/ path\?: Path\n/)
    // a short comment is cheaper written out than named
    expect(sdk).to.include(' n?: number // n\n')
    expect(check(sdk, "const a = await tools.read({ path: 'x', n: 1 })\nconst p: string = a.path ?? ''\nawait tools.list({})")).to.deep.equal([])
    expect(check(sdk, 'await tools.read({ path: 1, n: 1 })')).to.have.length(1)
    // what $describe answers stands alone: every comment written out
    expect(describeTools([withPath('read', true), withPath('list', false)]).split(where)).to.have.length(5)
    // the same whatever the registration order
    expect(renderSdk([withPath('stat', true), withPath('read', true), withPath('list', false)])).to.equal(sdk)
  })

  it('puts an object on one line once its comments went into aliases', () => {
    const where = 'a path relative to the workspace root (an absolute path must lie inside the root)'
    const args: JsonSchema = { type: 'object', properties: { path: { type: 'string', description: where } }, required: ['path'] }
    const output: JsonSchema = { type: 'object', properties: { path: { type: 'string', description: where }, size: { type: 'number' } } }
    const sdk = renderSdk([
      tool('read', args, output, 'Read.'),
      tool('stat', { ...args, properties: { ...args.properties, deep: { type: 'boolean' } } }, output, 'Stat.'),
    ])
    expect(sdk).to.include('  read(args: { path: Path }): Promise<ReadOutput>\n')
    expect(sdk).to.include('  stat(args: { path: Path; deep?: boolean }): Promise<ReadOutput>\n')
    expect(sdk).to.include('type ReadOutput = { path?: Path; size?: number }\n')
    expect(check(sdk, "const { path } = await tools.read({ path: 'x' })\nawait tools.stat({ path: path ?? '', deep: true })")).to.deep.equal([])
  })

  it('leaves out run_code', () => {
    const sdk = renderSdk(varied)
    expect(sdk).not.to.include('run_code')
    expect(sdk).not.to.include('RunCode')
  })

  it('quotes exotic tool names', () => {
    const sdk = renderSdk(varied)
    expect(sdk).to.include('  "list-dir"(args?: { path?: string })')
    expect(sdk).to.include('  "fs.stat"(args: { path: string })')
    expect(sdk).to.include('  "2fa:code"(args?: Record<string, unknown>): Promise<"ok">')
    expect(sdk).to.include('  "new"(args?: { "content-type"?: string }): Promise<null>')
    expect(sdk).to.include('  list_dir(args?: Record<string, never>)')
  })

  it('declares a multi-line type used more than once under one name, with deterministic suffixes', () => {
    const shape: JsonSchema = { type: 'object', properties: { a: { type: 'string', description: 'the a' } } }
    const tools = [tool('a-b', shape, shape), tool('a_b', shape), tool('aB', undefined, shape)]
    const sdk = renderSdk(tools)
    expect(sdk.match(/the a/g)).to.have.length(1)
    expect(sdk).to.include('type ABArgs = {')
    expect(sdk).to.include('"a-b"(args?: ABArgs): Promise<ABArgs>')
    expect(sdk).to.include('aB(args?: Record<string, unknown>): Promise<ABArgs>')
    expect(renderSdk([...tools].reverse())).to.equal(sdk)
  })

  it('leaves unknown outputs as Promise<unknown>, declaring nothing for them', () => {
    const sdk = renderSdk([tool('a'), tool('b')])
    expect(sdk).not.to.include('type ')
    expect(sdk.match(/Promise<unknown>/g)).to.have.length(2)
  })

  it('takes optional args only when nothing is required', () => {
    const sdk = renderSdk([
      tool('a', { type: 'object', properties: { x: { type: 'string' } } }),
      tool('b', { type: 'object', properties: { x: { type: 'string' } }, required: ['x'] }),
      tool('c', { anyOf: [{ type: 'object', properties: { x: { type: 'string' } }, required: ['x'] }, { type: 'string' }] }),
    ])
    expect(sdk).to.include('a(args?: { x?: string })')
    expect(sdk).to.include('b(args: { x: string })')
    expect(sdk).to.include('c(args: ')
  })

  it('keeps every description whole, line by line, as line comments', () => {
    const long = 'word '.repeat(100).trim()
    const sdk = renderSdk([tool('a', undefined, undefined, `first\n\n  second\tthird */ ${long}`)])
    expect(sdk).to.include(`  // first\n  // second third */ ${long}\n  a(`)
    expect(check(sdk)).to.deep.equal([])
  })

  it('is byte-identical whatever the input order', () => {
    const sdk = renderSdk(varied)
    for (let seed = 1; seed <= 20; seed++) expect(renderSdk(shuffle(varied, seed))).to.equal(sdk)
  })

  it('sorts by code unit, not locale', () => {
    const sdk = renderSdk([tool('b'), tool('B'), tool('a'), tool('_')])
    const order = [...sdk.matchAll(/^ {2}(\w+)\(/gm)].map((m) => m[1])
    expect(order).to.deep.equal(['B', '_', 'a', 'b'])
  })

  it('keeps one tool when a name repeats, whatever the order', () => {
    const tools = [tool('a', { type: 'object', properties: { x: { type: 'string' } } }), tool('a', { type: 'object', properties: { y: { type: 'string' } } })]
    const sdk = renderSdk(tools)
    expect(sdk.match(/ a\(/g)).to.have.length(1)
    expect(renderSdk([...tools].reverse())).to.equal(sdk)
  })

  it('never throws on garbage tools', () => {
    const sdk = renderSdk([
      null,
      1,
      { name: 3 },
      tool('ok'),
      {
        name: 'bad',
        get description(): never {
          throw new Error('boom')
        },
      },
    ] as unknown as SdkTool[])
    expect(sdk).to.include('ok(args?: Record<string, unknown>): Promise<unknown>')
    expect(renderSdk(null as unknown as SdkTool[])).to.equal(renderSdk([]))
  })

  it('renders an empty tool set', () => {
    expect(renderSdk([])).to.include('declare const tools: {\n  $search(')
    expect(check(renderSdk([]))).to.deep.equal([])
  })
})

describe('the rendered SDK type-checks', () => {
  it('accepts correct calls', () => {
    const body = `
      const file = await tools.read({ path: 'a.txt', encoding: 'utf8' })
      const text: string = file.text
      const [entries, other] = await Promise.all([tools['list-dir'](), tools.list_dir({})])
      entries.map((entry) => entry.toUpperCase())
      other.filter((entry) => entry !== null)
      const stat = await tools['fs.stat']({ path: '/' })
      if (stat) console.log(stat.size)
      const ok: 'ok' = await tools['2fa:code']()
      await tools['new']({ 'content-type': 'text/plain' })
      const env = await tools.env({ name: 'HOME', PATH: 1 })
      console.log(env.HOME.value)
      await tools.search({ query: { regex: '^a' }, filters: [{ field: 'x', op: '!=' }] })
      await tools.search({ query: 'plain' })
      const anything: unknown = await tools.garbage({ whatever: true })
      try {
        await tools.read({ path: 'missing' })
      } catch (error) {
        if (error instanceof ToolCallError) return { tool: error.toolName, code: error.code, message: error.message }
      }
      return { text, ok, anything }
    `
    expect(check(renderSdk(varied), body)).to.deep.equal([])
  })

  it('reports a wrong property by name', () => {
    const diagnostics = check(renderSdk(varied), `await tools.read({ pth: 'a.txt' })`)
    expect(diagnostics).to.have.length.greaterThan(0)
    expect(diagnostics.join('\n')).to.include("'pth'")
  })

  it('reports a wrong literal and a missing argument', () => {
    expect(check(renderSdk(varied), `await tools.read({ path: 'a', encoding: 'latin1' })`).join('\n')).to.include('"latin1"')
    expect(check(renderSdk(varied), `await tools['fs.stat']()`).join('\n')).to.include('Expected 1 arguments')
  })

  it('compiles for generated schemas of the supported subset', () => {
    const name = fc.stringMatching(/^[a-z_][a-z0-9_.:-]{0,8}$/)
    const { schema } = fc.letrec<{ schema: JsonSchema }>((tie) => ({
      schema: fc.oneof(
        { depthSize: 'small' },
        fc.constantFrom<JsonSchema>({ type: 'string' }, { type: 'integer' }, { type: ['boolean', 'null'] }, {}, { enum: ['a', 1, null] }, { const: 'x' }),
        fc.record({ type: fc.constant('array' as const), items: tie('schema') }),
        fc.record({ anyOf: fc.array(tie('schema'), { minLength: 1, maxLength: 3 }) }),
        fc
          .record({
            properties: fc.dictionary(name, tie('schema'), { maxKeys: 4 }),
            additionalProperties: fc.oneof(fc.boolean(), tie('schema')),
            description: fc.string(),
          })
          .chain((object) => fc.subarray(Object.keys(object.properties)).map((required): JsonSchema => ({ type: 'object', ...object, required }))),
      ),
    }))
    const tools = fc.uniqueArray(fc.record({ name, description: fc.string(), parameters: schema, output: schema }), {
      selector: (t) => t.name,
      minLength: 1,
      maxLength: 20,
    })
    fc.assert(
      fc.property(tools, (set) => {
        expect(check(renderSdk(set))).to.deep.equal([])
      }),
      { numRuns: 15 },
    )
  })
})

describe('sdkUsage', () => {
  it('names parallel calls, the error, the globals and what is absent', () => {
    const usage = sdkUsage()
    for (const phrase of ['Promise.all', 'ToolCallError', '`tools`', '`console`', 'built-ins', 'setTimeout', 'fetch', 'import'])
      expect(usage).to.include(phrase)
  })
})
