import { checkSchema, compileSchema } from '@faber/core'
import { deployment, disposeAll } from '@faber/core/testing'
import { expect } from 'chai'
import fc from 'fast-check'
import { importSchema } from '../src/index.ts'

describe('importSchema', () => {
  it('keeps what the subset says and drops $schema', () => {
    const input = {
      $schema: 'http://json-schema.org/draft-07/schema#',
      type: 'object',
      properties: { path: { type: 'string', description: 'where' }, head: { type: 'number', minimum: 1 } },
      required: ['path'],
      additionalProperties: false,
    }
    const { schema, degraded } = importSchema(input, { object: true })
    const { $schema, ...rest } = input
    expect(schema).to.deep.equal(rest)
    expect(degraded).to.deep.equal([])
  })

  it('inlines local $refs and one-branch allOf', () => {
    const { schema, degraded } = importSchema({
      type: 'object',
      definitions: { name: { type: 'string', minLength: 1 } },
      properties: { a: { $ref: '#/definitions/name' }, b: { allOf: [{ $ref: '#/definitions/name' }], description: 'b' } },
    })
    expect(schema.properties).to.deep.equal({ a: { type: 'string', minLength: 1 }, b: { type: 'string', minLength: 1, description: 'b' } })
    expect(degraded).to.deep.equal([])
  })

  it('turns what it cannot say into unknown, saying where and why', async () => {
    const { schema, degraded } = importSchema({
      type: 'object',
      $defs: { node: { type: 'object', properties: { children: { type: 'array', items: { $ref: '#/$defs/node' } } } } },
      properties: {
        tree: { $ref: '#/$defs/node' },
        either: { allOf: [{ type: 'string' }, { maxLength: 3 }] },
        far: { $ref: 'https://example.com/schema.json' },
        odd: { type: 'decimal' },
        nullable: { type: 'string', nullable: true, description: 'kept' },
      },
    })
    expect(schema.properties).to.deep.equal({
      tree: { type: 'object', properties: { children: { type: 'array', items: {} } } },
      either: {},
      far: {},
      odd: {},
      nullable: { description: 'kept' },
    })
    expect(degraded).to.deep.equal([
      '$.properties.tree.properties.children.items: recursive "$ref" #/$defs/node',
      '$.properties.either: unsupported keyword "allOf"',
      '$.properties.far: "$ref" https://example.com/schema.json is not a local reference',
      '$.properties.odd: unsupported type "decimal"; use one of string, number, integer, boolean, null, array, object',
      '$.properties.nullable: unsupported keyword "nullable"',
    ])
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register({ name: 'x', description: '', parameters: schema, output: { schema: {} }, execute: () => null })
    expect(ctx.tools.sdkDeclarations()).to.include('either?: unknown')
    await disposeAll()
  })

  it('makes an input schema an object schema whatever the server sent', () => {
    expect(importSchema({ anyOf: [{ type: 'object' }, { type: 'null' }] }, { object: true }).schema).to.deep.equal({ type: 'object' })
    expect(importSchema(undefined, { object: true }).schema).to.deep.equal({ type: 'object' })
    expect(importSchema({ properties: { a: { type: 'string' } } }, { object: true }).schema).to.deep.equal({
      type: 'object',
      properties: { a: { type: 'string' } },
    })
  })

  it('never throws and always yields a schema core accepts', () => {
    const keyword = fc.constantFrom(
      'type',
      'properties',
      'items',
      'anyOf',
      'allOf',
      'oneOf',
      '$ref',
      'not',
      'pattern',
      'minimum',
      'required',
      'enum',
      'additionalProperties',
      'if',
      'const',
      'description',
    )
    const { schema: arbitrary } = fc.letrec((tie) => ({
      schema: fc.oneof({ depthSize: 'small' }, fc.dictionary(keyword, fc.oneof(tie('value'), tie('schema')), { maxKeys: 5 }), fc.jsonValue({ maxDepth: 2 })),
      value: fc.oneof(
        fc.constantFrom('string', 'object', 'array', 'number', '#', '#/properties/a', '(', '^a+$', 3, -1, true, null),
        fc.array(tie('schema'), { maxLength: 3 }),
        fc.dictionary(fc.constantFrom('a', 'b', '$ref'), tie('schema'), { maxKeys: 3 }),
      ),
    }))
    fc.assert(
      fc.property(arbitrary, fc.boolean(), (input, object) => {
        const { schema } = importSchema(input, { object })
        checkSchema(schema)
        compileSchema(schema)
        if (object) expect(schema.type).to.equal('object')
      }),
      { numRuns: 500 },
    )
  })
})
