import { expect } from 'chai'
import { checkSchema, compileSchema, type JsonSchema } from '../src/schema.ts'
import { schemaToTs } from '../src/sdk.ts'

const address: JsonSchema = { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } }, required: ['city'] }

describe('schemas: local $ref to root $defs', () => {
  it('validates through the definition a $ref names, keeping the schema as written', () => {
    const schema: JsonSchema = {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      properties: { name: { type: 'string' }, home: { $ref: '#/$defs/address' }, work: { $ref: '#/$defs/address', description: 'optional' } },
      required: ['home'],
      additionalProperties: false,
      $defs: { address },
    }
    checkSchema(schema)
    const validate = compileSchema(schema)
    expect(validate({ home: { city: 'Oslo' } }, '$')).to.equal(undefined)
    expect(validate({ home: { street: 'x' } }, '$')).to.equal('$.home: missing required property "city"')
    expect(validate({ home: { city: 'Oslo' }, work: { city: 1 } }, '$')).to.equal('$.work.city: expected string, got integer')
  })

  it('follows a recursive definition as deep as the value goes', () => {
    const tree: JsonSchema = {
      $ref: '#/$defs/node',
      $defs: { node: { type: 'object', properties: { value: { type: 'number' }, children: { type: 'array', items: { $ref: '#/$defs/node' } } } } },
    }
    checkSchema(tree)
    const validate = compileSchema(tree)
    expect(validate({ value: 1, children: [{ value: 2, children: [{ value: 3 }] }] }, '$')).to.equal(undefined)
    expect(validate({ children: [{ children: [{ value: 'x' }] }] }, '$')).to.equal('$.children[0].children[0].value: expected number, got string')
  })

  it('refuses what it cannot follow, naming it', () => {
    expect(() => checkSchema({ $ref: 'https://example.com/s.json' })).to.throw('$: "$ref" "https://example.com/s.json": only local references')
    expect(() => checkSchema({ properties: { a: { $ref: '#/$defs/missing' } }, $defs: {} })).to.throw('$.properties.a: "$ref" "#/$defs/missing"')
    expect(() => checkSchema({ properties: { a: { $defs: {} } } })).to.throw('$.properties.a: "$defs" is supported at the root of a schema only')
    expect(() => checkSchema({ $defs: { a: { anyOf: [{ $ref: '#/$defs/b' }] }, b: { $ref: '#/$defs/a' } } })).to.throw(
      '"$defs" refer to each other without a property or item in between (a -> b -> a)',
    )
    expect(() => checkSchema({ $defs: { a: { type: 'bogus' } } })).to.throw('$.$defs.a: unsupported type "bogus"')
  })

  it('types a $ref in the SDK as the definition it names, a recursive one as unknown below its first level', () => {
    expect(schemaToTs({ type: 'object', properties: { home: { $ref: '#/$defs/address' } }, required: ['home'], $defs: { address } })).to.equal(
      '{ home: { street?: string; city: string } }',
    )
    expect(schemaToTs({ $ref: '#/$defs/node', $defs: { node: { type: 'object', properties: { next: { $ref: '#/$defs/node' } } } } })).to.equal(
      '{ next?: unknown }',
    )
  })
})
