// the Code Mode SDK: TypeScript declarations of every tool a `run_code` program can call as `await tools.<name>(args)`.
// rendering is total (whatever it cannot express becomes `unknown`) and deterministic, so the prompt prefix stays cacheable.

import { ANNOTATION_KEYWORDS, type JsonSchema, VALUE_CONSTRAINTS } from './schema.ts'

export interface SdkTool {
  name: string
  description: string
  parameters: JsonSchema
  output: JsonSchema
  /** a slot the renderer fills with the two rendered types and reads back while the schemas stay the same */
  rendered?: { parameters?: string; output?: string }
}

const RUN_CODE = 'run_code'
const DESCRIPTION_LIMIT = 200
// deeper than any real tool schema; keeps hostile input from exhausting the stack
const MAX_DEPTH = 48

// keywords that only describe or constrain values in ways a TypeScript type cannot; anything else outside
// the subset (`$ref`, `allOf`, `not`, `patternProperties`, ...) makes the schema render as `unknown`
const IGNORED = new Set([...ANNOTATION_KEYWORDS, ...VALUE_CONSTRAINTS, 'pattern', 'uniqueItems'])
const STRUCTURAL = new Set(['type', 'enum', 'const', 'anyOf', 'oneOf', 'items', 'properties', 'required', 'additionalProperties'])
const IDENTIFIER = /^[A-Za-z_$][\w$]*$/
// whitespace other than single inner spaces, or a comment terminator
const UNTIDY = /[^\S ]| {2}|^ | $|\*\//

// how tightly a rendered type binds, so parentheses go only where TypeScript needs them
const UNION = 0
const INTERSECTION = 1
const ATOM = 2

const NO_PROPERTIES: Record<string, never> = Object.freeze({})
const NO_NAMES: never[] = []

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function key(name: string) {
  return IDENTIFIER.test(name) ? name : JSON.stringify(name)
}

// a method named `new` would read as a construct signature
function methodKey(name: string) {
  return name === 'new' ? '"new"' : key(name)
}

/** one line, at most DESCRIPTION_LIMIT characters, safe inside a block comment */
function oneLine(text: unknown): string {
  if (typeof text !== 'string') return ''
  const line = UNTIDY.test(text) ? text.replace(/\s+/g, ' ').trim().replaceAll('*/', '*\\/') : text
  if (line.length <= DESCRIPTION_LIMIT) return line
  let end = DESCRIPTION_LIMIT - 1
  // never split a surrogate pair
  if (/[\uD800-\uDBFF]/.test(line[end - 1])) end--
  return `${line.slice(0, end).trimEnd()}…`
}

function literal(value: unknown): string {
  if (typeof value === 'string' || typeof value === 'boolean' || value === null) return JSON.stringify(value)
  if (typeof value === 'number' && Number.isFinite(value)) return JSON.stringify(value)
  // objects and arrays as enum members are legal JSON schema but rare in tool schemas; keep them honest and cheap
  return 'unknown'
}

/** the members as one union, repeats removed; `unknown` absorbs everything and `never` vanishes */
function union(members: string[]): string {
  if (members.length === 1) return members[0]
  const distinct: string[] = []
  const seen = members.length > 32 ? new Set<string>() : undefined
  for (const member of members) {
    if (member === 'unknown') return member
    if (member === 'never' || (seen ? seen.has(member) : distinct.includes(member))) continue
    seen?.add(member)
    distinct.push(member)
  }
  return distinct.length === 0 ? 'never' : distinct.join(' | ')
}

class Renderer {
  // the schemas on the current path, to cut cycles in hand-built objects
  private path: object[] = []
  // how tightly the type text last returned by `render` binds
  private prec = ATOM

  render(schema: unknown, indent: string): string {
    if (!isRecord(schema) || this.path.length >= MAX_DEPTH || this.path.includes(schema)) return this.atom('unknown')
    this.path.push(schema)
    const text = this.shape(schema, indent)
    this.path.pop()
    return text
  }

  private atom(text: string) {
    this.prec = ATOM
    return text
  }

  private shape(schema: Record<string, unknown>, indent: string): string {
    for (const keyword in schema) {
      if (!STRUCTURAL.has(keyword) && !IGNORED.has(keyword) && !keyword.startsWith('x-')) return this.atom('unknown')
    }
    let text: string | undefined
    if (schema.const !== undefined) text = this.atom(literal(schema.const))
    else if (schema.enum !== undefined) text = Array.isArray(schema.enum) ? this.union(schema.enum.map(literal)) : undefined
    else text = this.typed(schema, indent)
    if (text !== undefined && schema.anyOf !== undefined) text = this.combine(text, schema.anyOf, indent)
    if (text !== undefined && schema.oneOf !== undefined) text = this.combine(text, schema.oneOf, indent)
    return text ?? this.atom('unknown')
  }

  /** `text` intersected with the union of the branches; undefined when they are malformed */
  private combine(text: string, branches: unknown, indent: string) {
    if (!Array.isArray(branches) || branches.length === 0) return undefined
    const prec = this.prec
    return this.and(text, prec, this.branches(branches, indent))
  }

  /** the union of members, setting `prec` */
  private union(members: string[]) {
    const text = union(members)
    this.prec = text === 'never' || members.includes(text) ? ATOM : UNION
    return text
  }

  private branches(branches: unknown[], indent: string) {
    const texts: string[] = []
    const precs: number[] = []
    for (const branch of branches) {
      texts.push(this.render(branch, indent))
      precs.push(this.prec)
    }
    const text = union(texts)
    const single = texts.indexOf(text)
    this.prec = single !== -1 ? precs[single] : text === 'never' ? ATOM : UNION
    return text
  }

  /** the intersection of `left` and the type last rendered; `unknown` is its identity */
  private and(left: string, leftPrec: number, right: string) {
    if (right === 'unknown' || left === 'never') {
      this.prec = leftPrec
      return left
    }
    if (left === 'unknown' || right === 'never') return right
    const text = `${this.paren(left, leftPrec, INTERSECTION)} & ${this.paren(right, this.prec, INTERSECTION)}`
    this.prec = INTERSECTION
    return text
  }

  private paren(text: string, prec: number, needed: number) {
    return prec >= needed ? text : `(${text})`
  }

  /** the type `type` (or, without it, the object or array keywords) describes; undefined when malformed */
  private typed(schema: Record<string, unknown>, indent: string): string | undefined {
    let { type } = schema
    if (type === undefined) {
      if (schema.properties !== undefined || schema.additionalProperties !== undefined || schema.required !== undefined) type = 'object'
      else if (schema.items !== undefined) type = 'array'
      else return this.atom('unknown')
    }
    if (!Array.isArray(type)) return this.single(type, schema, indent)
    if (type.length === 0) return undefined
    const members: string[] = []
    for (const t of type) {
      const member = this.single(t, schema, indent)
      if (member === undefined) return undefined
      members.push(member)
    }
    // every single type renders as an atom
    return this.union(members)
  }

  private single(type: unknown, schema: Record<string, unknown>, indent: string): string | undefined {
    if (type === 'array') {
      const item = schema.items === undefined ? this.atom('unknown') : this.render(schema.items, indent)
      return this.atom(`${this.paren(item, this.prec, ATOM)}[]`)
    }
    this.prec = ATOM
    switch (type) {
      case 'object':
        return this.object(schema, indent)
      case 'string':
      case 'number':
      case 'boolean':
      case 'null':
        return type
      case 'integer':
        return 'number'
    }
  }

  private object(schema: Record<string, unknown>, indent: string): string | undefined {
    const { properties = NO_PROPERTIES, required = NO_NAMES, additionalProperties } = schema
    if (!isRecord(properties) || !Array.isArray(required)) return undefined
    if (additionalProperties !== undefined && typeof additionalProperties !== 'boolean' && !isRecord(additionalProperties)) return undefined
    const inner = `${indent}  `
    // the property types, kept only when an index signature must cover them
    const types: string[] | undefined = isRecord(additionalProperties) ? [] : undefined
    let body = ''
    let optional = false
    let count = 0
    for (const name in properties) {
      if (!Object.hasOwn(properties, name)) continue
      const property = properties[name]
      const type = this.render(property, inner)
      const description = isRecord(property) ? oneLine(property.description) : ''
      if (description) body += `${inner}/** ${description} */\n`
      const isRequired = required.includes(name)
      optional ||= !isRequired
      body += `${inner}${key(name)}${isRequired ? '' : '?'}: ${type}\n`
      types?.push(type)
      count++
    }
    if (types) {
      const extra = this.render(additionalProperties, inner)
      // every named property must be assignable to the index signature, so widen it to cover them
      let index = union([extra, ...types])
      if (count > 0 && index.includes('\n')) index = 'unknown'
      if (optional) index = union([index, 'undefined'])
      if (count === 0 && index === 'unknown') return this.atom('Record<string, unknown>')
      body += `${inner}[key: string]: ${index}\n`
    } else if (count === 0) return this.atom(additionalProperties === false ? 'Record<string, never>' : 'Record<string, unknown>')
    else if (additionalProperties === true) body += `${inner}[key: string]: unknown\n`
    return this.atom(`{\n${body}${indent}}`)
  }
}

/** TypeScript type text for one schema (exported for tests and reuse); never throws */
export function schemaToTs(schema: JsonSchema, indent = ''): string {
  try {
    return new Renderer().render(schema, indent)
  } catch {
    // a throwing getter or proxy in a hand-built schema
    return 'unknown'
  }
}

/** PascalCase from the letters and digits of a tool name; never empty, never starting with a digit */
function pascal(name: string) {
  let result = ''
  for (const word of name.split(/[^A-Za-z0-9]+/)) {
    if (word) result += word[0].toUpperCase() + word.slice(1)
  }
  return /^[A-Za-z]/.test(result) ? result : `Tool${result}`
}

function compare(a: string, b: string) {
  return a < b ? -1 : a > b ? 1 : 0
}

function safeJson(value: unknown) {
  try {
    return JSON.stringify(value) ?? ''
  } catch {
    return ''
  }
}

/** whether the tool can be called without arguments, so its binding takes `args?:` */
function argsOptional(schema: unknown, rendered: string) {
  if (rendered === 'unknown') return true
  if (!isRecord(schema) || schema.anyOf !== undefined || schema.oneOf !== undefined || schema.const !== undefined || schema.enum !== undefined) return false
  if (schema.type !== undefined && schema.type !== 'object') return false
  return !Array.isArray(schema.required) || schema.required.length === 0
}

/** deterministic TypeScript declarations for a set of tools; never throws */
export function renderSdk(tools: readonly SdkTool[]): string {
  let list: SdkTool[] = []
  try {
    list = tools.filter((tool) => isRecord(tool) && typeof tool.name === 'string' && tool.name !== '' && tool.name !== RUN_CODE)
  } catch {}
  // equal names are a registry bug; break the tie by content so the output still ignores input order
  list.sort((a, b) => compare(a.name, b.name) || compare(safeJson(a), safeJson(b)))
  const used = new Set<string>()
  let types = ''
  let bindings = ''
  let previous: string | undefined
  for (const tool of list) {
    if (tool.name === previous) continue
    previous = tool.name
    const base = pascal(tool.name)
    let typeName = base
    for (let n = 2; used.has(typeName); n++) typeName = `${base}${n}`
    used.add(typeName)
    let parameters = 'unknown'
    let output = 'unknown'
    let description = ''
    let optional = true
    try {
      const memo = isRecord(tool.rendered) ? tool.rendered : undefined
      parameters = memo?.parameters ?? schemaToTs(tool.parameters)
      output = memo?.output ?? schemaToTs(tool.output)
      if (memo) {
        memo.parameters = parameters
        memo.output = output
      }
      description = oneLine(tool.description)
      optional = argsOptional(tool.parameters, parameters)
    } catch {}
    types += `type ${typeName}Args = ${parameters}\ntype ${typeName}Output = ${output}\n\n`
    if (description) bindings += `  /** ${description} */\n`
    bindings += `  ${methodKey(tool.name)}(args${optional ? '?' : ''}: ${typeName}Args): Promise<${typeName}Output>\n`
  }
  return (
    'declare class ToolCallError extends Error {\n  readonly toolName: string\n  readonly code?: string\n}\n\n' +
    types +
    (bindings ? `declare const tools: {\n${bindings}}\n` : 'declare const tools: {}\n')
  )
}

/** how to use the SDK, for the prompt section that precedes it */
export function sdkUsage(): string {
  return [
    'Call the tools below by writing TypeScript for `run_code`. Your code is the body of an async function: top-level `await` and `return` work.',
    '- Call a tool with `await tools.<name>(args)`; the declarations below give each one its argument and result types.',
    '- A failed call rejects with a `ToolCallError` (`toolName`, `code`, `message`); catch it to recover or try another way.',
    '- Overlap independent calls: `const [a, b] = await Promise.all([tools.x(...), tools.y(...)])`.',
    '- Only what you `return` or `console.log` comes back to the conversation, so filter and summarise inside the program.',
  ].join('\n')
}
