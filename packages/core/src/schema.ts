// the JSON-schema subset Faber understands, its validator, and `t`, a typed DSL that produces it.
// everything outside the subset is refused at registration, naming the keyword, so no constraint is silently dropped.

import { canonicalJson, type Json, JsonError, segment, snapshot } from './json.ts'

export type JsonType = 'string' | 'number' | 'integer' | 'boolean' | 'null' | 'array' | 'object'

export interface JsonSchema {
  type?: JsonType | JsonType[]
  description?: string
  title?: string
  default?: unknown
  examples?: unknown[]
  format?: string
  enum?: readonly unknown[]
  const?: unknown
  anyOf?: JsonSchema[]
  oneOf?: JsonSchema[]
  minLength?: number
  maxLength?: number
  pattern?: string
  minimum?: number
  maximum?: number
  exclusiveMinimum?: number
  exclusiveMaximum?: number
  multipleOf?: number
  items?: JsonSchema
  minItems?: number
  maxItems?: number
  uniqueItems?: boolean
  properties?: Record<string, JsonSchema>
  required?: string[]
  additionalProperties?: boolean | JsonSchema
  /** definitions, at the root only, for `$ref: '#/$defs/<name>'` anywhere in the schema */
  $defs?: Record<string, JsonSchema>
  $ref?: string
  [annotation: string]: unknown
}

const TYPES = new Set<string>(['string', 'number', 'integer', 'boolean', 'null', 'array', 'object'])

// keywords that only describe; they are kept and never validated
export const ANNOTATION_KEYWORDS: ReadonlySet<string> = new Set([
  '$schema',
  '$id',
  '$comment',
  'title',
  'description',
  'default',
  'examples',
  'format',
  'deprecated',
  'readOnly',
  'writeOnly',
  'contentEncoding',
  'contentMediaType',
])

/** constraints on values that a TypeScript type does not express */
export const VALUE_CONSTRAINTS = ['minLength', 'maxLength', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf', 'minItems', 'maxItems']

export const SUPPORTED_KEYWORDS = [
  'type',
  'enum',
  'const',
  'anyOf',
  'oneOf',
  'pattern',
  ...VALUE_CONSTRAINTS,
  'items',
  'uniqueItems',
  'properties',
  'required',
  'additionalProperties',
] as const

const SUPPORTED = new Set<string>(SUPPORTED_KEYWORDS)

export class SchemaError extends TypeError {
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`)
    this.name = 'SchemaError'
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/**
 * deepest nesting of subschemas (items, properties, anyOf, ...) a tool may declare. validators follow the schema, so
 * this bounds how deep validation recurses; it also stops a schema object that contains itself.
 */
export const MAX_SCHEMA_DEPTH = 64

const LOCAL_REF = /^#\/\$defs\/([^/]+)$/

/** the definition a local `$ref` names (`#/$defs/<name>`, JSON-pointer escapes undone), or undefined */
export function refName(ref: unknown): string | undefined {
  const match = typeof ref === 'string' ? LOCAL_REF.exec(ref) : null
  return match ? decodeURIComponent(match[1]).replace(/~1/g, '/').replace(/~0/g, '~') : undefined
}

/** throws a SchemaError naming the first construct outside the supported subset */
export function checkSchema(schema: unknown, path = '$', depth = 1, defs?: Record<string, unknown>): asserts schema is JsonSchema {
  if (!isRecord(schema)) throw new SchemaError(path, `a schema must be an object, got ${schema === null ? 'null' : typeof schema}`)
  if (depth > MAX_SCHEMA_DEPTH) throw new SchemaError(path, `schemas nest deeper than ${MAX_SCHEMA_DEPTH} levels (or one contains itself); flatten it`)
  if (depth === 1 && schema.$defs !== undefined) defs = checkDefs(schema.$defs, path)
  else if (schema.$defs !== undefined) throw new SchemaError(path, '"$defs" is supported at the root of a schema only')
  if (schema.$ref !== undefined) {
    const name = refName(schema.$ref)
    if (name === undefined || !defs || !Object.hasOwn(defs, name)) {
      throw new SchemaError(path, `"$ref" ${JSON.stringify(schema.$ref)}: only local references to a root definition, "#/$defs/<name>", are supported`)
    }
  }
  for (const [keyword, value] of Object.entries(schema)) {
    if (ANNOTATION_KEYWORDS.has(keyword) || keyword.startsWith('x-') || keyword === '$defs' || keyword === '$ref') continue
    if (!SUPPORTED.has(keyword)) {
      throw new SchemaError(
        path,
        `unsupported JSON-schema keyword "${keyword}"; Faber supports ${SUPPORTED_KEYWORDS.join(', ')} (plus annotations such as description)`,
      )
    }
    if (VALUE_CONSTRAINTS.includes(keyword) && typeof value !== 'number') throw new SchemaError(path, `"${keyword}" must be a number`)
  }
  const { type } = schema
  if (type !== undefined) {
    const types = Array.isArray(type) ? type : [type]
    for (const t of types) {
      if (typeof t !== 'string' || !TYPES.has(t)) throw new SchemaError(path, `unsupported type ${JSON.stringify(t)}; use one of ${[...TYPES].join(', ')}`)
    }
  }
  if (schema.enum !== undefined && !Array.isArray(schema.enum)) throw new SchemaError(path, '"enum" must be an array')
  for (const keyword of ['const', 'enum'] as const) {
    if (schema[keyword] === undefined) continue
    try {
      snapshot(schema[keyword], `${path}.${keyword}`)
    } catch (error) {
      if (error instanceof JsonError) throw new SchemaError(path, `"${keyword}" must be JSON: ${error.message}`)
      throw error
    }
  }
  if (schema.pattern !== undefined) {
    if (typeof schema.pattern !== 'string') throw new SchemaError(path, '"pattern" must be a string')
    try {
      new RegExp(schema.pattern, 'u')
    } catch (error) {
      throw new SchemaError(path, `"pattern" is not a valid regular expression: ${(error as Error).message}`)
    }
  }
  for (const keyword of ['anyOf', 'oneOf'] as const) {
    const branches = schema[keyword]
    if (branches === undefined) continue
    if (!Array.isArray(branches) || branches.length === 0) throw new SchemaError(path, `"${keyword}" must be a non-empty array of schemas`)
    for (const [i, branch] of branches.entries()) checkSchema(branch, `${path}.${keyword}[${i}]`, depth + 1, defs)
  }
  if (schema.items !== undefined) {
    if (Array.isArray(schema.items)) throw new SchemaError(path, 'tuple "items" (an array of schemas) is not supported; use one schema for every item')
    checkSchema(schema.items, `${path}.items`, depth + 1, defs)
  }
  if (schema.properties !== undefined) {
    if (!isRecord(schema.properties)) throw new SchemaError(path, '"properties" must be an object of schemas')
    for (const [name, sub] of Object.entries(schema.properties)) checkSchema(sub, `${path}.properties${segment(name)}`, depth + 1, defs)
  }
  if (schema.required !== undefined) {
    if (!Array.isArray(schema.required) || schema.required.some((r) => typeof r !== 'string')) {
      throw new SchemaError(path, '"required" must be an array of property names')
    }
  }
  if (isRecord(schema.additionalProperties)) checkSchema(schema.additionalProperties, `${path}.additionalProperties`, depth + 1, defs)
  else if (schema.additionalProperties !== undefined && typeof schema.additionalProperties !== 'boolean') {
    throw new SchemaError(path, '"additionalProperties" must be a boolean or a schema')
  }
}

/** checks the root's definitions; a reference cycle that never descends into the value (a ref to itself, or through anyOf) is refused */
function checkDefs(value: unknown, path: string): Record<string, unknown> {
  if (!isRecord(value)) throw new SchemaError(path, '"$defs" must be an object of schemas')
  for (const [name, def] of Object.entries(value)) checkSchema(def, `${path}.$defs${segment(name)}`, 2, value)
  // what each definition may become at the same place in the value: its own $ref and its anyOf/oneOf branches' refs
  const sameLevel = (schema: unknown): string[] => {
    if (!isRecord(schema)) return []
    const names = refName(schema.$ref) === undefined ? [] : [refName(schema.$ref) as string]
    for (const keyword of ['anyOf', 'oneOf']) if (Array.isArray(schema[keyword])) for (const branch of schema[keyword]) names.push(...sameLevel(branch))
    return names
  }
  const state = new Map<string, 'open' | 'done'>()
  const visit = (name: string, trail: string[]) => {
    if (state.get(name) === 'done') return
    if (state.get(name) === 'open')
      throw new SchemaError(
        path,
        `"$defs" refer to each other without a property or item in between (${[...trail, name].join(' -> ')}); no value could ever match`,
      )
    state.set(name, 'open')
    for (const next of sameLevel(value[name])) visit(next, [...trail, name])
    state.set(name, 'done')
  }
  for (const name of Object.keys(value)) visit(name, [])
  return value
}

// ---- validation

/** returns undefined when the value matches, else a message that starts with the path of the mismatch */
export type Validator = (value: unknown, path: string) => string | undefined

function typeName(value: unknown) {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'array'
  if (typeof value === 'number' && Number.isInteger(value)) return 'integer'
  return typeof value
}

function matchesType(type: JsonType, value: unknown) {
  switch (type) {
    case 'string':
      return typeof value === 'string'
    case 'number':
      return typeof value === 'number'
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value)
    case 'boolean':
      return typeof value === 'boolean'
    case 'null':
      return value === null
    case 'array':
      return Array.isArray(value)
    case 'object':
      return isRecord(value)
  }
}

function sameJson(a: unknown, b: unknown) {
  if (a === b) return true
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false
  return canonicalJson(a as Json) === canonicalJson(b as Json)
}

/** code points, counted without copying the string */
function codePoints(text: string) {
  let count = text.length
  for (let i = 0; i < text.length - 1; i++) {
    const code = text.charCodeAt(i)
    if (code >= 0xd800 && code < 0xdc00 && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      count--
      i++
    }
  }
  return count
}

function show(value: unknown) {
  // a string can be megabytes long: cut it before quoting it
  const text = JSON.stringify(typeof value === 'string' && value.length > 60 ? value.slice(0, 60) : value)
  return text === undefined ? String(value) : text.length > 60 ? `${text.slice(0, 57)}...` : text
}

/** the root's definitions, each compiled once, on first use (so a recursive definition compiles) */
class Definitions {
  private compiled = new Map<string, Validator>()

  constructor(private defs: Record<string, JsonSchema>) {}

  ref(name: string): Validator {
    let validator: Validator | undefined
    return (value, path) => {
      validator ??= this.compiled.get(name)
      if (!validator) {
        validator = compileChecks(this.defs[name], this)
        this.compiled.set(name, validator)
      }
      return validator(value, path)
    }
  }
}

// a mismatch's message starts with its path, but a value that matches (every call's arguments and result, nearly always)
// needs none: a value is checked first under NO_PATH, which a container hands its children as it is instead of building
// a path string per property or item, and only a mismatch is checked again to name where it is
const NO_PATH = '\u0000(no path)'

function childPath(path: string, segment: string) {
  return path === NO_PATH ? NO_PATH : path + segment
}

/** compiles a checked schema into a validator; checks run in a fixed order so messages are stable */
export function compileSchema(schema: JsonSchema): Validator {
  const validate = compileChecks(schema, isRecord(schema.$defs) ? new Definitions(schema.$defs) : undefined)
  return (value, path) => {
    const mismatch = validate(value, NO_PATH)
    // a check answers the same for the same value; a live value that answers otherwise still gets its first answer
    return mismatch === undefined ? undefined : (validate(value, path) ?? mismatch)
  }
}

function compileChecks(schema: JsonSchema, definitions: Definitions | undefined): Validator {
  const compile = (sub: JsonSchema) => compileChecks(sub, definitions)
  const checks: Validator[] = []
  const ref = refName(schema.$ref)
  if (ref !== undefined && definitions) checks.push(definitions.ref(ref))
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type]
    const expected = types.join(' or ')
    // on every call's arguments and result: one type (the usual case) is checked without a closure per value
    const [only] = types
    checks.push(
      types.length === 1
        ? (value, path) => (matchesType(only, value) ? undefined : `${path}: expected ${expected}, got ${typeName(value)}`)
        : (value, path) => {
            for (const type of types) if (matchesType(type, value)) return
            return `${path}: expected ${expected}, got ${typeName(value)}`
          },
    )
  }
  if (schema.const !== undefined) {
    const expected = schema.const
    checks.push((value, path) => (sameJson(value, expected) ? undefined : `${path}: expected ${show(expected)}, got ${show(value)}`))
  }
  if (schema.enum !== undefined) {
    const options = schema.enum
    const list = options.map(show).join(', ')
    checks.push((value, path) => (options.some((o) => sameJson(o, value)) ? undefined : `${path}: expected one of ${list}, got ${show(value)}`))
  }
  const { minLength, maxLength, pattern } = schema
  if (minLength !== undefined || maxLength !== undefined || pattern !== undefined) {
    const regexp = pattern === undefined ? undefined : new RegExp(pattern, 'u')
    checks.push((value, path) => {
      if (typeof value !== 'string') return
      const length = codePoints(value)
      if (minLength !== undefined && length < minLength) return `${path}: expected at least ${minLength} characters, got ${length}`
      if (maxLength !== undefined && length > maxLength) return `${path}: expected at most ${maxLength} characters, got ${length}`
      if (regexp && !regexp.test(value)) return `${path}: expected a string matching /${pattern}/, got ${show(value)}`
    })
  }
  const { minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf } = schema
  if ([minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf].some((n) => n !== undefined)) {
    checks.push((value, path) => {
      if (typeof value !== 'number') return
      if (minimum !== undefined && value < minimum) return `${path}: expected a number >= ${minimum}, got ${value}`
      if (maximum !== undefined && value > maximum) return `${path}: expected a number <= ${maximum}, got ${value}`
      if (exclusiveMinimum !== undefined && value <= exclusiveMinimum) return `${path}: expected a number > ${exclusiveMinimum}, got ${value}`
      if (exclusiveMaximum !== undefined && value >= exclusiveMaximum) return `${path}: expected a number < ${exclusiveMaximum}, got ${value}`
      if (multipleOf !== undefined && !Number.isInteger(value / multipleOf)) return `${path}: expected a multiple of ${multipleOf}, got ${value}`
    })
  }
  const { items, minItems, maxItems, uniqueItems } = schema
  if (items !== undefined || minItems !== undefined || maxItems !== undefined || uniqueItems) {
    const item = items && compile(items)
    checks.push((value, path) => {
      if (!Array.isArray(value)) return
      if (minItems !== undefined && value.length < minItems) return `${path}: expected at least ${minItems} items, got ${value.length}`
      if (maxItems !== undefined && value.length > maxItems) return `${path}: expected at most ${maxItems} items, got ${value.length}`
      if (uniqueItems) {
        const seen = new Set<string>()
        for (let i = 0; i < value.length; i++) {
          const text = canonicalJson(value[i] as Json)
          if (seen.has(text)) return `${path}[${i}]: duplicates an earlier item; items must be unique`
          seen.add(text)
        }
      }
      if (item) {
        for (let i = 0; i < value.length; i++) {
          const error = item(value[i], path === NO_PATH ? NO_PATH : `${path}[${i}]`)
          if (error) return error
        }
      }
    })
  }
  const { properties = {}, required = [], additionalProperties } = schema
  if (schema.properties !== undefined || schema.required !== undefined || additionalProperties !== undefined) {
    const props = Object.entries(properties).map(([name, sub]) => ({ name, check: compile(sub), at: segment(name) }))
    const known = new Set(Object.keys(properties))
    const extra = typeof additionalProperties === 'object' ? compile(additionalProperties) : undefined
    const allowed = Object.keys(properties).join(', ') || 'none'
    checks.push((value, path) => {
      if (!isRecord(value)) return
      for (const name of required) {
        if (!Object.hasOwn(value, name)) return `${path}: missing required property "${name}"`
      }
      for (const { name, check, at } of props) {
        if (!Object.hasOwn(value, name)) continue
        const error = check(value[name], childPath(path, at))
        if (error) return error
      }
      if (additionalProperties === false || extra) {
        // for-in walks the object's enumeration cache, where Object.keys would copy its keys into a new array per call
        for (const name in value) {
          if (known.has(name) || !Object.hasOwn(value, name)) continue
          if (!extra) return `${path}: unexpected property "${name}" (allowed: ${allowed})`
          const error = extra(value[name], path === NO_PATH ? NO_PATH : path + segment(name))
          if (error) return error
        }
      }
    })
  }
  for (const keyword of ['anyOf', 'oneOf'] as const) {
    const branches = schema[keyword]?.map(compile)
    if (!branches) continue
    const exactlyOne = keyword === 'oneOf'
    checks.push((value, path) => {
      let matched = 0
      let first: string | undefined
      for (const branch of branches) {
        const error = branch(value, path)
        if (error === undefined) matched++
        else first ??= error
      }
      if (matched === 0) return `${path}: matched none of the ${branches.length} allowed shapes (first mismatch: ${first})`
      if (exactlyOne && matched > 1) return `${path}: matched ${matched} shapes of a oneOf; it must match exactly one`
    })
  }
  if (checks.length === 0) return () => undefined
  if (checks.length === 1) return checks[0]
  return (value, path) => {
    for (const check of checks) {
      const error = check(value, path)
      if (error !== undefined) return error
    }
  }
}

// ---- the typed DSL

declare const phantom: unique symbol

/** a JSON schema that carries the TypeScript type of the values it accepts */
export class TSchema<T = unknown, Optional extends boolean = boolean> {
  declare readonly [phantom]: { type: T; optional: Optional }

  constructor(
    readonly json: JsonSchema,
    readonly isOptional = false as Optional,
  ) {}

  /** the property may be left out of its object */
  optional(): TSchema<T, true> {
    return new TSchema<T, true>(this.json, true)
  }

  describe(description: string): TSchema<T, Optional> {
    return new TSchema(Object.freeze({ ...this.json, description }), this.isOptional)
  }

  default(value: T): TSchema<T, true> {
    return new TSchema<T, true>(Object.freeze({ ...this.json, default: value }), true)
  }
}

export type Infer<S> = S extends TSchema<infer T, any> ? T : never

type Simplify<T> = { [K in keyof T]: T[K] } & {}
type Shape = Record<string, TSchema<any, boolean>>
type RequiredKeys<P extends Shape> = { [K in keyof P]: P[K] extends TSchema<any, true> ? never : K }[keyof P]
type OptionalKeys<P extends Shape> = { [K in keyof P]: P[K] extends TSchema<any, true> ? K : never }[keyof P]
export type InferShape<P extends Shape> = Simplify<{ [K in RequiredKeys<P>]: Infer<P[K]> } & { [K in OptionalKeys<P>]?: Infer<P[K]> }>

type Primitive = string | number | boolean | null

function make<T>(json: JsonSchema) {
  return new TSchema<T, false>(Object.freeze(json))
}

interface StringOptions {
  minLength?: number
  maxLength?: number
  pattern?: string
  format?: string
}

interface NumberOptions {
  minimum?: number
  maximum?: number
  exclusiveMinimum?: number
  exclusiveMaximum?: number
  multipleOf?: number
}

/** the typed schema DSL: `t.object({ path: t.string(), limit: t.integer({ minimum: 1 }).optional() })` */
export const t = {
  string: (options: StringOptions = {}) => make<string>({ type: 'string', ...options }),
  number: (options: NumberOptions = {}) => make<number>({ type: 'number', ...options }),
  integer: (options: NumberOptions = {}) => make<number>({ type: 'integer', ...options }),
  boolean: () => make<boolean>({ type: 'boolean' }),
  null: () => make<null>({ type: 'null' }),
  unknown: () => make<Json>({}),
  literal: <const V extends Primitive>(value: V) => make<V>({ const: value }),
  enum: <const V extends readonly [Primitive, ...Primitive[]]>(values: V) => make<V[number]>({ enum: values }),
  array: <S extends TSchema<any, any>>(items: S, options: { minItems?: number; maxItems?: number; uniqueItems?: boolean } = {}) =>
    make<Infer<S>[]>({ type: 'array', items: items.json, ...options }),
  object: <P extends Shape>(shape: P, options: { additionalProperties?: boolean } = {}) => {
    const properties: Record<string, JsonSchema> = {}
    const required: string[] = []
    for (const [name, schema] of Object.entries(shape)) {
      // a key is data: `__proto__` is a property name here, not the prototype
      Object.defineProperty(properties, name, { value: schema.json, enumerable: true, writable: true, configurable: true })
      if (!schema.isOptional) required.push(name)
    }
    return make<InferShape<P>>({ type: 'object', properties, required, additionalProperties: options.additionalProperties ?? false })
  },
  record: <S extends TSchema<any, any>>(values: S) => make<Record<string, Infer<S>>>({ type: 'object', additionalProperties: values.json }),
  union: <S extends TSchema<any, any>[]>(branches: S) => make<Infer<S[number]>>({ anyOf: branches.map((b) => b.json) }),
}
