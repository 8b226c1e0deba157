// the Code Mode SDK: TypeScript declarations of every tool a `run_code` program can call as `await tools.<name>(args)`,
// in full or as a compact index. rendering is total (whatever it cannot express becomes `unknown`), complete (nothing
// is cut) and deterministic, so the prompt prefix stays cacheable.

import { bindable } from './collapse.ts'
import { ANNOTATION_KEYWORDS, type JsonSchema, refName, VALUE_CONSTRAINTS } from './schema.ts'

export interface SdkTool {
  name: string
  description: string
  parameters: JsonSchema
  output: JsonSchema
  /** a slot the renderer fills with the two rendered types and reads back while the schemas stay the same */
  rendered?: { parameters?: string; output?: string }
}

// deeper than any real tool schema; keeps hostile input from exhausting the stack
const MAX_DEPTH = 48

// keywords that only describe or constrain values in ways a TypeScript type cannot (and `$defs`, rendered where a
// `$ref` names one); anything else outside the subset (`allOf`, `not`, `patternProperties`, ...) renders as `unknown`
const IGNORED = new Set([...ANNOTATION_KEYWORDS, ...VALUE_CONSTRAINTS, 'pattern', 'uniqueItems', '$defs'])
const STRUCTURAL = new Set(['type', 'enum', 'const', 'anyOf', 'oneOf', 'items', 'properties', 'required', 'additionalProperties'])
const IDENTIFIER = /^[A-Za-z_$][\w$]*$/
// whitespace other than single inner spaces, or a comment terminator
const UNTIDY = /[^\S ]| {2}|^ | $|\*\//

// how tightly a rendered type binds, so parentheses go only where TypeScript needs them
const UNION = 0
const INTERSECTION = 1
const ATOM = 2

const ONE_LINE_MEMBERS = 4
const ONE_LINE_WIDTH = 80

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

/** one line, so it fits a line comment; nothing is cut */
function oneLine(text: unknown): string {
  if (typeof text !== 'string') return ''
  return UNTIDY.test(text) ? text.replace(/\s+/g, ' ').trim() : text
}

/** a description as line comments at `indent`, its lines kept (blank ones dropped), nothing cut */
function docComment(text: string, indent: string): string {
  let out = ''
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.replace(/\s+/g, ' ').trim()
    if (line) out += `${indent}// ${line}\n`
  }
  return out
}

// constraints a TypeScript type cannot say, shown as doc tags: `@minimum 1 @default 10`
const TAGS = [
  'default',
  'minimum',
  'exclusiveMinimum',
  'maximum',
  'exclusiveMaximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'pattern',
  'format',
  'minItems',
  'maxItems',
  'uniqueItems',
]

function tags(schema: Record<string, unknown>): string {
  let text = ''
  for (const tag of TAGS) {
    const value = schema[tag]
    if (value === undefined || (tag === 'uniqueItems' && value !== true)) continue
    if (tag === 'uniqueItems') {
      text += ' @uniqueItems'
      continue
    }
    let shown: string
    try {
      shown = typeof value === 'string' && tag !== 'default' ? value : (JSON.stringify(value) ?? '')
    } catch {
      continue
    }
    text += ` @${tag} ${shown.replace(/\s+/g, ' ')}`
  }
  return text.trimStart()
}

/** the property's doc comment text: its description and its constraints */
function propertyDoc(property: unknown): string {
  if (!isRecord(property)) return ''
  return [oneLine(property.description), tags(property)].filter(Boolean).join(' ')
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

/** a small object without comments reads as well on one line, and costs the model fewer tokens */
function inline(members: string[]): string | undefined {
  if (members.length > ONE_LINE_MEMBERS || members.some((m) => m.includes('//') || m.includes('\n'))) return undefined
  const line = `{ ${members.map((m) => m.trim()).join('; ')} }`
  return line.length <= ONE_LINE_WIDTH ? line : undefined
}

class Renderer {
  // the schemas on the current path, to cut cycles in hand-built objects
  private path: object[] = []
  // how tightly the type text last returned by `render` binds
  private prec = ATOM

  // the root's definitions: a local `$ref` renders as the type of the definition it names (a recursive one as unknown)
  constructor(private defs?: Record<string, unknown>) {}

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
    const ref = refName(schema.$ref)
    if (ref !== undefined && this.defs && Object.hasOwn(this.defs, ref)) return this.render(this.defs[ref], indent)
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
      // a property's description and constraints follow it as a line comment: the same words, fewer tokens than /** */
      const doc = propertyDoc(property)
      const isRequired = required.includes(name)
      optional ||= !isRequired
      // before a property whose type spans lines, after it otherwise
      if (doc && type.includes('\n')) body += `${inner}// ${doc}\n`
      body += `${inner}${key(name)}${isRequired ? '' : '?'}: ${type}${doc && !type.includes('\n') ? ` // ${doc}` : ''}\n`
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
    return this.atom(inline(body.slice(0, -1).split(`\n${inner}`)) ?? `{\n${body}${indent}}`)
  }
}

/** TypeScript type text for one schema (exported for tests and reuse); never throws */
export function schemaToTs(schema: JsonSchema, indent = ''): string {
  try {
    return new Renderer(isRecord(schema.$defs) ? schema.$defs : undefined).render(schema, indent)
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

/** the tools a rendering covers: well-named, run_code left out, sorted by code unit, one per name */
export function sdkTools(tools: readonly SdkTool[]): SdkTool[] {
  let list: SdkTool[] = []
  try {
    list = tools.filter((tool) => isRecord(tool) && typeof tool.name === 'string' && tool.name !== '' && bindable(tool.name))
  } catch {}
  // equal names are a registry bug; break the tie by content so the output still ignores input order
  list.sort((a, b) => compare(a.name, b.name) || compare(safeJson(a), safeJson(b)))
  return list.filter((tool, i) => i === 0 || list[i - 1].name !== tool.name)
}

interface RenderedTool {
  name: string
  description: string
  args: string
  output: string
  optional: boolean
}

function renderTool(tool: SdkTool): RenderedTool {
  const rendered: RenderedTool = { name: tool.name, description: '', args: 'unknown', output: 'unknown', optional: true }
  try {
    const memo = isRecord(tool.rendered) ? tool.rendered : undefined
    rendered.args = memo?.parameters ?? schemaToTs(tool.parameters)
    rendered.output = memo?.output ?? schemaToTs(tool.output)
    if (memo) {
      memo.parameters = rendered.args
      memo.output = rendered.output
    }
    rendered.description = typeof tool.description === 'string' ? tool.description : ''
    rendered.optional = argsOptional(tool.parameters, rendered.args)
  } catch {}
  return rendered
}

const reindent = (text: string, indent: string) => (indent ? text.replaceAll('\n', `\n${indent}`) : text)

function member(tool: RenderedTool, indent: string, args: string, output: string) {
  const signature = `${indent}${methodKey(tool.name)}(args${tool.optional ? '?' : ''}: ${args}): Promise<${output}>\n`
  return docComment(tool.description, indent) + signature
}

const TOOLS_OPEN = 'declare const tools: {\n'
const TOOL_CALL_ERROR = 'declare class ToolCallError extends Error { toolName: string; code?: string }\n'

/** the two helpers every program has next to the tools; they are not tools and make no call through the pipeline */
export const SDK_HELPERS =
  '  $search(query: string, limit?: number): Promise<{ name: string; summary: string }[]>\n' + '  $describe(...names: string[]): Promise<string>\n'

/** a top-level object whose comments all went into aliases of shared properties may now fit on one line */
function flat(text: string) {
  if (!text.startsWith('{\n') || !text.endsWith('\n}')) return text
  const lines = text.slice(2, -2).split('\n')
  return lines.some((line) => !/^ {2}\S/.test(line)) ? text : (inline(lines) ?? text)
}

/**
 * deterministic TypeScript declarations for a set of tools; never throws. argument and output types are written
 * where they are used, except that a multi-line type used more than once is declared once under a name; `unknown`
 * outputs stay `Promise<unknown>`.
 */
export function renderSdk(tools: readonly SdkTool[]): string {
  const list = sdkTools(tools).map(renderTool)
  const aliases = sharedProperties(list)
  const uses = new Map<string, number>()
  for (const tool of list) {
    for (const text of [tool.args, tool.output]) if (text.includes('\n')) uses.set(text, (uses.get(text) ?? 0) + 1)
  }
  const named = new Map<string, string>()
  const taken = new Set<string>()
  let types = ''
  const nameFor = (text: string, base: string) => {
    if ((uses.get(text) ?? 0) < 2) return reindent(flat(text), '  ')
    let name = named.get(text)
    if (name === undefined) {
      name = base
      for (let n = 2; taken.has(name); n++) name = `${base}${n}`
      taken.add(name)
      named.set(text, name)
      types += `type ${name} = ${flat(text)}\n`
    }
    return name
  }
  let bindings = ''
  for (const tool of list) {
    const base = pascal(tool.name)
    bindings += member(tool, '  ', nameFor(tool.args, `${base}Args`), nameFor(tool.output, `${base}Output`))
  }
  for (const alias of aliases) types += alias
  return `${TOOL_CALL_ERROR}\n${types ? `${types}\n` : ''}${TOOLS_OPEN}${SDK_HELPERS}${bindings}}\n`
}

/** declarations as the prompt shows them in full: with every tool declared, the discovery helpers add nothing */
export function withoutHelpers(sdk: string): string {
  const at = sdk.indexOf(TOOLS_OPEN + SDK_HELPERS)
  return at === -1 ? sdk : sdk.slice(0, at + TOOLS_OPEN.length) + sdk.slice(at + TOOLS_OPEN.length + SDK_HELPERS.length)
}

// a property line as the renderer writes it: `<indent><key><?>: <type> // <doc>`, for a one-line type without quotes
// or slashes (so neither side can hide the separator)
const PROPERTY_LINE = /^( +)([A-Za-z_$][\w$]*)(\??): ([^"'/\n]+?) \/\/ (.+)$/gm
/** a shorter comment costs less written out than named */
const MIN_SHARED_DOC = 32
/** names the aliases of shared properties must not take: what programs already see, and TypeScript's own */
const RESERVED = new Set([
  'ToolCallError',
  'Promise',
  'Record',
  'Array',
  'Error',
  'Object',
  'String',
  'Number',
  'Boolean',
  'Date',
  'Map',
  'Set',
  'JSON',
  'Math',
])

/**
 * a property documented the same way in several places (a `path` that every file tool takes with the same words) is
 * declared once as a type alias carrying its comment, and each use names the alias; nothing is dropped, only repeated
 * words. rewrites the tools' argument and output texts in place and returns the alias declarations, in first-use
 * order (the tools are sorted, so this is deterministic).
 */
function sharedProperties(list: RenderedTool[]): string[] {
  const seen = new Map<string, { key: string; type: string; doc: string; count: number }>()
  for (const tool of list) {
    for (const text of [tool.args, tool.output]) {
      for (const [, , key, , type, doc] of text.matchAll(PROPERTY_LINE)) {
        const id = `${type} // ${doc}`
        const entry = seen.get(id)
        if (entry) entry.count++
        else seen.set(id, { key, type, doc, count: 1 })
      }
    }
  }
  const taken = new Set<string>(RESERVED)
  for (const tool of list) taken.add(`${pascal(tool.name)}Args`).add(`${pascal(tool.name)}Output`)
  const alias = new Map<string, string>()
  const aliases: string[] = []
  for (const [id, { key, type, doc, count }] of seen) {
    if (count < 2 || doc.length < MIN_SHARED_DOC) continue
    let name = pascal(key)
    for (let n = 2; taken.has(name); n++) name = `${pascal(key)}${n}`
    const declaration = `type ${name} = ${type} // ${doc}\n`
    // worth it only where it saves a fifth of the text
    if (declaration.length + count * name.length > 0.8 * count * id.length) continue
    taken.add(name)
    alias.set(id, name)
    aliases.push(declaration)
  }
  if (alias.size === 0) return aliases
  const rewrite = (text: string) =>
    text.replace(PROPERTY_LINE, (line, indent: string, key: string, optional: string, type: string, doc: string) => {
      const name = alias.get(`${type} // ${doc}`)
      return name ? `${indent}${key}${optional}: ${name}` : line
    })
  for (const tool of list) {
    tool.args = rewrite(tool.args)
    tool.output = rewrite(tool.output)
  }
  return aliases
}

/** the complete declarations of these tools, each standing alone (what `tools.$describe` answers) */
export function describeTools(tools: readonly SdkTool[]): string {
  return sdkTools(tools)
    .map((tool) => {
      const rendered = renderTool(tool)
      return member(rendered, '', rendered.args, rendered.output)
    })
    .join('\n')
}

const SUMMARY_LIMIT = 160

/** the first sentence of a description, on one line; an index shows it, `$describe` gives the rest */
export function summaryOf(description: unknown): string {
  if (typeof description !== 'string') return ''
  const text = description.replace(/\s+/g, ' ').trim()
  const end = /[.!?](?= |$)/.exec(text)
  let sentence = end ? text.slice(0, end.index + 1) : text
  // a sentence the index cannot hold ends visibly cut; $describe has it whole
  if (sentence.length > SUMMARY_LIMIT) sentence = `${sentence.slice(0, SUMMARY_LIMIT - 1).trimEnd()}…`
  return sentence
}

/** the argument names of a tool, `?` marking optional ones: `path, limit?` */
export function argNames(parameters: unknown): string {
  if (!isRecord(parameters) || !isRecord(parameters.properties)) return ''
  const required = Array.isArray(parameters.required) ? parameters.required : []
  return Object.keys(parameters.properties)
    .map((name) => `${IDENTIFIER.test(name) ? name : JSON.stringify(name)}${required.includes(name) ? '' : '?'}`)
    .join(', ')
}

const OTHER = 'other'

/** groups of an index: an MCP server's prefix (`server__`), else a first name segment shared by several tools */
export function groupTools(names: readonly string[]): Map<string, string[]> {
  const first = (name: string) => {
    const server = name.indexOf('__')
    if (server > 0) return name.slice(0, server)
    const segment = /^[A-Za-z0-9]+(?=[._:-])/.exec(name)
    return segment ? segment[0] : undefined
  }
  const counts = new Map<string, number>()
  for (const name of names) {
    const key = first(name)
    if (key !== undefined) counts.set(key, (counts.get(key) ?? 0) + 1)
  }
  const groups = new Map<string, string[]>()
  for (const name of names) {
    const key = first(name)
    const group = key !== undefined && (counts.get(key) ?? 0) > 1 ? key : OTHER
    let list = groups.get(group)
    if (!list) groups.set(group, (list = []))
    list.push(name)
  }
  const keys = [...groups.keys()].sort((a, b) => (a === OTHER ? 1 : b === OTHER ? -1 : compare(a, b)))
  return new Map(keys.map((key) => [key, groups.get(key)!]))
}

export type IndexLevel = 'index' | 'names'

/**
 * a compact index of the tools, grouped: `index` gives each tool's call shape and first sentence, `names` only the
 * names (for catalogs too large even for that)
 */
export function renderIndex(tools: readonly SdkTool[], level: IndexLevel = 'index'): string {
  const list = sdkTools(tools)
  const byName = new Map(list.map((tool) => [tool.name, tool]))
  let text = ''
  for (const [group, names] of groupTools(list.map((tool) => tool.name))) {
    if (level === 'names') {
      text += `${group} (${names.length}): ${names.join(', ')}\n`
      continue
    }
    text += `${group}:\n`
    for (const name of names) {
      const tool = byName.get(name)!
      const summary = summaryOf(tool.description)
      text += `${name}(${argNames(tool.parameters)})${summary ? ` ${summary}` : ''}\n`
    }
  }
  return text
}

/** globals the prompt names as present in a program, besides `tools`, `console` and `ToolCallError` (checked on both sandboxes) */
export const PROGRAM_GLOBALS = ['JSON', 'Math', 'Date', 'Intl', 'Promise', 'Map', 'Set', 'RegExp', 'Array', 'Object', 'String', 'Number', 'Uint8Array']
/** globals a program might expect that it does not have */
export const ABSENT_GLOBALS = ['setTimeout', 'setInterval', 'fetch', 'require', 'process', 'Buffer', 'URL']

/** how to use the SDK, for the prompt section that precedes it; the calling convention and what comes back are in run_code's own description */
export function sdkUsage(): string {
  return `Run independent calls together in \`Promise.all\`; a failed call throws \`ToolCallError\`. Besides \`tools\` and \`console\`, programs have the JS built-ins but no ${ABSENT_GLOBALS.join(', ')} or import.`
}
