// MCP servers describe tools in full JSON Schema (zod output: `$schema`, `$ref`, `allOf`, ...); Faber's registry accepts
// a subset and refuses the rest. importing keeps what the subset can say and turns each sub-schema it cannot say into
// `{}` (unknown): the SDK type degrades there and validation is left to the server, but no constraint is dropped while
// its type still looks precise.

import { checkSchema, type JsonSchema, SUPPORTED_KEYWORDS } from '@faber/core'

export interface ImportedSchema {
  schema: JsonSchema
  /** JSON paths of the sub-schemas that became unknown, with why */
  degraded: string[]
}

const ANNOTATIONS = ['title', 'description', 'default', 'examples', 'format', 'deprecated', 'readOnly', 'writeOnly', 'contentEncoding', 'contentMediaType']
// definitions are not constraints; they are inlined where a `$ref` points at them
const DEFINITIONS = new Set(['$schema', '$id', '$comment', '$defs', 'definitions'])
const SUPPORTED = new Set<string>(SUPPORTED_KEYWORDS)
// deeper than any real tool schema; keeps hostile input from exhausting the stack
const MAX_DEPTH = 32

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** follows a local JSON pointer (`#/$defs/x`, `#/properties/a`) inside the root schema */
function resolvePointer(root: unknown, ref: string): unknown {
  if (ref === '#') return root
  if (!ref.startsWith('#/')) return undefined
  let node: unknown = root
  for (const raw of ref.slice(2).split('/')) {
    const part = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~')
    if (!isRecord(node) && !Array.isArray(node)) return undefined
    node = (node as Record<string, unknown>)[part]
  }
  return node
}

function annotationsOf(schema: Record<string, unknown>): JsonSchema {
  const kept: JsonSchema = {}
  for (const key of ['title', 'description'] as const) if (typeof schema[key] === 'string') kept[key] = schema[key]
  return kept
}

/**
 * turns a server's JSON schema into one core's `checkSchema` accepts. `object: true` makes the top level an object
 * schema whatever happens below (MCP input schemas must be objects).
 */
export function importSchema(input: unknown, options: { object?: boolean } = {}): ImportedSchema {
  const degraded: string[] = []

  const unknownAt = (path: string, why: string, schema: unknown): JsonSchema => {
    degraded.push(`${path}: ${why}`)
    return isRecord(schema) ? annotationsOf(schema) : {}
  }

  const visit = (schema: unknown, path: string, depth: number, ancestors: readonly unknown[]): JsonSchema => {
    if (schema === true) return {}
    if (!isRecord(schema)) return unknownAt(path, `not a schema object (${schema === null ? 'null' : typeof schema})`, schema)
    if (depth > MAX_DEPTH) return unknownAt(path, 'nested too deeply', schema)

    if (typeof schema.$ref === 'string') {
      const ref = schema.$ref
      const siblings = Object.keys(schema).filter((k) => k !== '$ref' && !ANNOTATIONS.includes(k) && !DEFINITIONS.has(k))
      if (siblings.length) return unknownAt(path, `"$ref" next to ${siblings.map((s) => `"${s}"`).join(', ')}`, schema)
      const target = resolvePointer(input, ref)
      if (target === undefined) return unknownAt(path, `"$ref" ${ref} is not a local reference`, schema)
      // a reference to a schema being expanded is a recursive type, which the subset cannot say
      if (ancestors.includes(target)) return unknownAt(path, `recursive "$ref" ${ref}`, schema)
      return { ...visit(target, path, depth + 1, ancestors), ...annotationsOf(schema) }
    }

    if (Array.isArray(schema.allOf) && schema.allOf.length === 1) {
      const { allOf, ...rest } = schema
      const structural = Object.keys(rest).filter((k) => !ANNOTATIONS.includes(k) && !DEFINITIONS.has(k))
      if (!structural.length) return { ...visit(allOf[0], `${path}.allOf[0]`, depth + 1, ancestors), ...annotationsOf(schema) }
    }

    ancestors = [...ancestors, schema]
    const out: JsonSchema = {}
    for (const [keyword, value] of Object.entries(schema)) {
      if (DEFINITIONS.has(keyword) || keyword.startsWith('x-')) continue
      if (ANNOTATIONS.includes(keyword)) {
        out[keyword] = value
        continue
      }
      if (!SUPPORTED.has(keyword)) return unknownAt(path, `unsupported keyword "${keyword}"`, schema)
      switch (keyword) {
        case 'properties': {
          if (!isRecord(value)) return unknownAt(path, '"properties" is not an object', schema)
          const properties: Record<string, JsonSchema> = {}
          for (const [name, sub] of Object.entries(value)) properties[name] = visit(sub, `${path}.properties.${name}`, depth + 1, ancestors)
          out.properties = properties
          break
        }
        case 'items':
          if (Array.isArray(value)) return unknownAt(path, 'tuple "items"', schema)
          out.items = visit(value, `${path}.items`, depth + 1, ancestors)
          break
        case 'additionalProperties':
          out.additionalProperties = typeof value === 'boolean' ? value : visit(value, `${path}.additionalProperties`, depth + 1, ancestors)
          break
        case 'anyOf':
        case 'oneOf':
          if (!Array.isArray(value) || !value.length) return unknownAt(path, `"${keyword}" is not a non-empty array`, schema)
          out[keyword] = value.map((branch, i) => visit(branch, `${path}.${keyword}[${i}]`, depth + 1, ancestors))
          break
        default:
          out[keyword] = value
      }
    }
    try {
      // children are already acceptable, so what fails here is this level's own keywords (a bad regexp, a wrong type)
      checkSchema(out, path)
    } catch (error) {
      return unknownAt(path, (error as Error).message.replace(`${path}: `, ''), schema)
    }
    return out
  }

  let schema = visit(input, '$', 0, [])
  if (options.object && schema.type !== 'object') {
    if (schema.type !== undefined || schema.anyOf || schema.oneOf || schema.enum || schema.const !== undefined) {
      degraded.push('$: not an object schema')
      schema = annotationsOf(schema)
    }
    schema = { type: 'object', ...schema }
  }
  return { schema, degraded }
}
