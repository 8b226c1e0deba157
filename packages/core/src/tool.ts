// tool definitions: what a plugin registers, and the compiled form the executor runs.

import type { Agent } from './agent.ts'
import type { CallSite } from './code-runtime.ts'
import type { Json } from './json.ts'
import { checkSchema, compileSchema, type Infer, type JsonSchema, SchemaError, TSchema, type Validator } from './schema.ts'

/** hints for policy plugins; they never change what the core does */
export interface ToolAnnotations {
  readOnly?: boolean
  destructive?: boolean
  idempotent?: boolean
  openWorld?: boolean
  [hint: string]: unknown
}

let tokenOf: (token: ExecutionToken) => ExecutionRecord | undefined
let mintedFor: (token: ExecutionToken, exec: ExecutionRecord) => void
let runningIn: (exec: ExecutionRecord) => object | undefined
let setRunning: (exec: ExecutionRecord, pipeline: object | undefined) => void
let markBodyStarted: (exec: ExecutionRecord) => void
let bodyStarted: (exec: ExecutionRecord) => boolean

/** an opaque handle on one execution; only the registry mints them */
export class ExecutionToken {
  // the execution it was minted for, in a private field: only this module reaches it, so a token that was forged,
  // copied or proxied names no execution
  #exec: ExecutionRecord | undefined

  /** @internal */
  constructor(
    readonly id: number,
    readonly callId: string,
    readonly name: string,
  ) {
    Object.freeze(this)
  }

  toString() {
    return `execution#${this.id}(${this.name})`
  }

  static {
    tokenOf = (token) => (#exec in token ? token.#exec : undefined)
    mintedFor = (token, exec) => {
      token.#exec = exec
    }
  }
}

/**
 * @internal the execution the pipeline hands its participants, frozen. its token is minted when first read (by a
 * run_code body for its nested calls, by a plugin keying its state on it): most calls never read it, and pay for no
 * token. the pipeline marks it running between create and finish, in a private field that still changes on a frozen
 * object, so a nested call finds its parent's execution from the token alone, with no map
 */
export class ExecutionRecord implements Execution {
  // assigned in the constructor (declared: no field to define first, per call)
  declare readonly callId: string
  declare readonly name: string
  declare readonly arguments: Json
  declare readonly agent: Agent | undefined
  declare readonly session: string | undefined
  declare readonly parent: ExecutionToken | undefined
  declare readonly site: CallSite | undefined
  declare readonly rootCallId: string
  declare readonly signal: AbortSignal
  declare readonly tool: ToolInfo
  #id: number
  #token: ExecutionToken | undefined
  #pipeline: object | undefined
  #bodyStarted: true | undefined

  constructor(
    id: number,
    callId: string,
    name: string,
    args: Json,
    agent: Agent | undefined,
    session: string | undefined,
    parent: ExecutionToken | undefined,
    site: CallSite | undefined,
    rootCallId: string,
    signal: AbortSignal,
    tool: ToolInfo,
  ) {
    this.callId = callId
    this.name = name
    this.arguments = args
    this.agent = agent
    this.session = session
    this.parent = parent
    this.site = site
    this.rootCallId = rootCallId
    this.signal = signal
    this.tool = tool
    this.#id = id
    Object.freeze(this)
  }

  get token(): ExecutionToken {
    let token = this.#token
    if (!token) {
      token = this.#token = new ExecutionToken(this.#id, this.callId, this.name)
      mintedFor(token, this)
    }
    return token
  }

  static {
    runningIn = (exec) => exec.#pipeline
    setRunning = (exec, pipeline) => {
      exec.#pipeline = pipeline
    }
    markBodyStarted = (exec) => {
      exec.#bodyStarted = true
    }
    bodyStarted = (exec) => exec.#bodyStarted === true
  }
}

/**
 * @internal the pipeline's hold on an execution while it runs: `start` and `end` it, and read the execution a token
 * names back only for the pipeline running it. not exported from the package
 */
export const liveExecutions = {
  start: (exec: ExecutionRecord, pipeline: object) => setRunning(exec, pipeline),
  end: (exec: ExecutionRecord) => setRunning(exec, undefined),
  of: (token: ExecutionToken, pipeline: object): Execution | undefined => {
    const exec = tokenOf(token)
    return exec && runningIn(exec) === pipeline ? exec : undefined
  },
  /** the body of `exec` was called: whatever ends the call later ends a call whose effects may have happened */
  bodyStarted: (exec: Execution) => markBodyStarted(exec as ExecutionRecord),
  ran: (exec: Execution): boolean => bodyStarted(exec as ExecutionRecord),
  /** whether `exec` is a call a pipeline runs now (false once it ended) */
  running: (exec: object): boolean => exec instanceof ExecutionRecord && runningIn(exec) !== undefined,
}

/** the frozen view of one call that every pipeline participant receives */
export interface Execution {
  readonly token: ExecutionToken
  readonly callId: string
  readonly name: string
  readonly arguments: Json
  readonly agent?: Agent
  /**
   * the conversation the call belongs to when its agent serves several at once (the MCP server names each MCP
   * session); a nested call's is its program's. undefined: the agent's one conversation (an agent loop's)
   */
  readonly session?: string
  /** the enclosing execution (a run_code program) for a nested call */
  readonly parent?: ExecutionToken
  /** for a nested call: the line and column of its program where it was made, when the code runtime said */
  readonly site?: CallSite
  /** the outermost call's id, the call's own for a direct call */
  readonly rootCallId: string
  readonly signal: AbortSignal
  /** the resolved definition, for hints such as annotations */
  readonly tool: ToolInfo
}

/** what policy plugins may read of a definition */
export interface ToolInfo {
  readonly name: string
  readonly description: string
  readonly annotations: Readonly<ToolAnnotations>
  readonly timeoutMs?: number
  /** the agent whose layer registered it, undefined for a global tool */
  readonly owner?: Agent
  /** the plugin that registered it (`core` for run_code) */
  readonly plugin: string
}

export interface ToolRun {
  /** aborted when the call is cancelled or timed out; a body must honour it */
  readonly signal: AbortSignal
  readonly exec: Execution
}

export interface ToolOutput<A, O> {
  schema: JsonSchema | TSchema<O, any>
  /** the model-facing text; by default strings are shown raw and other values as pretty JSON */
  render?(args: A, value: O): string
}

export interface ToolDefinition<A = any, O = any> {
  name: string
  description: string
  parameters: JsonSchema | TSchema<A, any>
  output: ToolOutput<A, O>
  execute(args: A, run: ToolRun): O | Promise<O>
  isConcurrencySafe?(args: A): boolean
  timeoutMs?: number
  annotations?: ToolAnnotations
}

export interface TypedToolDefinition<P extends TSchema<any, any>, O extends TSchema<any, any>> {
  name: string
  description: string
  parameters: P
  output: { schema: O; render?(args: Infer<P>, value: Infer<O>): string }
  execute(args: Infer<P>, run: ToolRun): Infer<O> | Promise<Infer<O>>
  isConcurrencySafe?(args: Infer<P>): boolean
  timeoutMs?: number
  annotations?: ToolAnnotations
}

/** a definition whose argument and output types come from the `t` schemas it declares */
export function defineTool<P extends TSchema<any, any>, O extends TSchema<any, any>>(
  definition: TypedToolDefinition<P, O>,
): ToolDefinition<Infer<P>, Infer<O>> {
  return definition
}

export const RUN_CODE = 'run_code'

const NAME = /^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$/

/** compact JSON: a result is read by a model, and pretty-printing only pads it with tokens */
export function defaultRender(value: Json): string {
  return typeof value === 'string' ? value : jsonText(value)
}

/** the JSON text of a snapshotted value (finite numbers only); null, a boolean or a number without JSON.stringify */
export function jsonText(value: Json): string {
  if (value === null) return 'null'
  if (typeof value === 'boolean' || (typeof value === 'number' && Number.isFinite(value))) return String(value)
  return JSON.stringify(value)
}

/** the default cap on a result's model-facing content, in characters (ToolRuntime's `resultChars`) */
export const RESULT_CHARS = 40_000

/** `text` cut to `limit` characters, with a note of what was cut and how to get less */
export function capContent(text: string, limit: number): string {
  if (text.length <= limit) return text
  let end = limit
  // never split a surrogate pair
  if (/[\uD800-\uDBFF]/.test(text[end - 1])) end--
  const cut = text.length - end
  return `${text.slice(0, end)}\n[cut: the last ${cut} of ${text.length} characters were left out (results are capped at ${limit}). Ask for less: a narrower range, a filter, a smaller page, or (with run_code) pick what you need inside a program.]`
}

/** a registered definition with its schemas checked and compiled once */
export interface CompiledTool {
  readonly definition: ToolDefinition
  readonly info: ToolInfo
  readonly parameters: JsonSchema
  readonly output: JsonSchema
  readonly validateArguments: Validator
  readonly validateOutput: Validator
  /** the SDK's rendering of the two schemas, filled on first use (the schemas never change after registration) */
  readonly rendered: { parameters?: string; output?: string }
  render(args: Json, value: Json): string
  /** the definition declares no render: a result's content is its value's JSON text (a string as it is), capped at resultChars */
  readonly rendersJson: boolean
  readonly resultChars: number
}

function toJsonSchema(schema: unknown, path: string): JsonSchema {
  const json = schema instanceof TSchema ? schema.json : schema
  checkSchema(json, path)
  return json
}

// a transport's schemas (run_code's) are the core's own module constants, never changed once built: checked and compiled
// once per process rather than once per runtime instance, which a context set up again would pay each time
const transportSchemas = new WeakMap<object, JsonSchema>()
const transportValidators = new WeakMap<JsonSchema, Validator>()

function transportSchema(schema: unknown, path: string): JsonSchema {
  if (typeof schema !== 'object' || schema === null) return toJsonSchema(schema, path)
  let json = transportSchemas.get(schema)
  if (!json) {
    json = toJsonSchema(schema, path)
    transportSchemas.set(schema, json)
  }
  return json
}

function transportValidator(schema: JsonSchema) {
  let validate = transportValidators.get(schema)
  if (!validate) {
    validate = compileSchema(schema)
    transportValidators.set(schema, validate)
  }
  return validate
}

/** checks a definition at registration; every refusal says what to change */
export function compileTool(definition: ToolDefinition, registrar: { owner?: Agent; plugin: string; transport?: boolean; resultChars?: number }): CompiledTool {
  if (typeof definition !== 'object' || definition === null) throw new TypeError('a tool definition must be an object')
  const { name } = definition
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new TypeError(`invalid tool name ${JSON.stringify(name)}: use 1-128 characters from letters, digits, "_", ".", ":" and "-"`)
  }
  if (!registrar.transport && name === RUN_CODE) throw new TypeError(`"${RUN_CODE}" is reserved for Code Mode's transport and cannot be registered`)
  if (typeof definition.description !== 'string') throw new TypeError(`tool "${name}": description must be a string`)
  if (typeof definition.execute !== 'function') throw new TypeError(`tool "${name}": execute must be a function`)
  if (definition.timeoutMs !== undefined && !(typeof definition.timeoutMs === 'number' && definition.timeoutMs > 0)) {
    throw new TypeError(`tool "${name}": timeoutMs must be a positive number of milliseconds`)
  }
  let parameters: JsonSchema
  let output: JsonSchema
  const schema = registrar.transport ? transportSchema : toJsonSchema
  try {
    parameters = schema(definition.parameters, 'parameters')
    if (parameters.type !== 'object') throw new SchemaError('parameters', 'must be an object schema ({ type: "object", properties: ... })')
    const declared = definition.output as ToolOutput<unknown, unknown> | undefined
    if (typeof declared !== 'object' || declared === null || declared.schema === undefined) {
      throw new SchemaError('output', 'is missing: declare output: { schema, render? } so results can be validated and typed in the SDK')
    }
    if (declared.render !== undefined && typeof declared.render !== 'function') throw new SchemaError('output.render', 'must be a function')
    output = schema(declared.schema, 'output.schema')
  } catch (error) {
    if (error instanceof SchemaError) throw new TypeError(`tool "${name}": ${error.message}`)
    throw error
  }
  const render = definition.output.render
  const limit = registrar.resultChars ?? RESULT_CHARS
  return Object.freeze({
    definition,
    info: Object.freeze({
      name,
      description: definition.description,
      annotations: Object.freeze({ ...definition.annotations }),
      timeoutMs: definition.timeoutMs,
      owner: registrar.owner,
      plugin: registrar.plugin,
    }),
    parameters,
    output,
    validateArguments: registrar.transport ? transportValidator(parameters) : compileSchema(parameters),
    validateOutput: registrar.transport ? transportValidator(output) : compileSchema(output),
    rendered: {},
    rendersJson: !render,
    resultChars: limit,
    render: render
      ? (args: Json, value: Json) => capContent(String(render(args, value)), limit)
      : (_: Json, value: Json) => capContent(defaultRender(value), limit),
  })
}
