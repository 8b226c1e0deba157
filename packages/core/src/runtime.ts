// ToolRuntime, the `ctx.tools` service: the registry (layers per agent) and the views derived from it. execution
// is the pipeline's (pipeline.ts), which asks this registry what an agent can see.

import { type Context, type Events, Schema, Service } from 'cordis'
import { Agent, agentOf, kAddAgent } from './agent.ts'
import { Catalog } from './catalog.ts'
import { type CodeMode, createRunCode } from './code-mode.ts'
import { type CodeRunLimits, CodeRunLimits as CodeRunLimitsSchema, type CodeRuntime } from './code-runtime.ts'
import { bindable, collapses, type Mode } from './collapse.ts'
import { defineConfig } from './config.ts'
import { EVERY_AGENT, ListenerIndex, pluginName, traceCallerAs } from './cordis.ts'
import { dispatch, emitEach } from './dispatch.ts'
import type { ApprovalService, DispatchNext, ExecutionInput, Executor, Guard, PostDecision, PreDecision } from './execution.ts'
import { DeploymentHealth, type PluginFault } from './health.ts'
import { messageOf } from './message.ts'
import { type WaitingPrograms, WaitTally } from './person-wait.ts'
import { Pipeline } from './pipeline.ts'
import type { ToolResult } from './result.ts'
import type { ExecutionMode } from './scheduler.ts'
import type { JsonSchema } from './schema.ts'
import { renderSdk, type SdkTool } from './sdk.ts'
import { type CompiledTool, compileTool, type Execution, RESULT_CHARS, RUN_CODE, type ToolDefinition, type ToolInfo } from './tool.ts'

type Awaitable<T> = T | Promise<T>

declare module 'cordis' {
  interface Context {
    tools: ToolRuntime
    codeRuntime: CodeRuntime
    approval: ApprovalService
  }

  interface Events {
    'tools/pre-execute'(exec: Execution): Awaitable<PreDecision | undefined | void>
    /** `signal` is the one in force at this wrapper: exec.signal, or a replacement passed to next() further out */
    'tools/execute'(exec: Execution, next: DispatchNext, signal: AbortSignal): Promise<ToolResult>
    'tools/post-execute'(exec: Execution, result: ToolResult): Awaitable<PostDecision | undefined | void>
    'tools/result'(exec: Execution, result: ToolResult): void
    /** the tool set, a mode or a restriction changed: views and the SDK are recomputed on demand */
    'tools/changed'(generation: number): void
  }
}

export interface ToolSchema {
  name: string
  description: string
  parameters: JsonSchema
}

export interface PromptSection {
  /** stable id, e.g. `tools:code-only` */
  id: string
  /** sections sort by order; per-tool guidance sits in 100-199 */
  order: number
  text: string
}

export interface Wire {
  mode: Mode
  /** the tool schemas sent to the model */
  tools: readonly ToolSchema[]
  /** the prompt sections the registry contributes */
  sections: readonly PromptSection[]
}

export interface ModeOrigin {
  mode: Mode
  /** the agent whose presentAs decided it, undefined for the deployment default */
  from?: Agent
}

export type Mask = { allow: string[] } | { deny: string[] }

/** how the SDK is shown in the prompt: every declaration, a compact index, or whichever fits the token budget */
export type SdkPresentation = 'full' | 'index' | 'auto'

/** one noteworthy contributor to a layer, for inspection */
interface Owned<T> {
  value: T
  plugin: string
}

interface Layer {
  tools: Map<string, Owned<CompiledTool>>
  guards: Owned<Guard>[]
  masks: Owned<Mask>[]
  modes: Owned<Mode>[]
  sdks: Owned<SdkPresentation>[]
}

interface View {
  mode: Mode
  modeFrom?: Agent
  /** every tool the agent can see, run_code included when the mode is not native */
  tools: Map<string, CompiledTool>
  /** names hidden by a mask, with the agent whose mask hid them */
  masked: Map<string, Agent>
  /** names registered on an agent that hide a same-named tool from further up */
  shadows: Map<string, { by: Agent | undefined; hidden: Agent | undefined }>
  /** the nearest presentSdk on the agent's chain, else the config's `sdk` */
  sdkPresentation: SdkPresentation
  schemas?: readonly ToolSchema[]
  wire?: Wire
  sdk?: string
  sdkTools?: SdkTool[]
  catalog?: Catalog
}

/** the id of the prompt section `wire` gives for the code-only rule (empty unless the agent's calls collapse) */
export const CODE_ONLY_SECTION = 'tools:code-only'
/** the id of the prompt section `wire` gives for the SDK (under `code` and `both`) */
export const SDK_SECTION = 'tools:sdk'

const CODE_ONLY_ORDER = 50
/** bindings every program gets next to the tools (see catalog.ts) */
const PROGRAM_HELPERS = ['$search', '$describe']
const SDK_ORDER = 200

const PIPELINE_EVENTS = ['tools/pre-execute', 'tools/execute', 'tools/post-execute', 'tools/result', 'code/call-start', 'code/call-settle'] as const
export type PipelineEvent = (typeof PIPELINE_EVENTS)[number]

class ToolRuntime extends Service {
  static name = 'tools'
  static inject: string[] = []
  declare ctx: Context

  private layers = new Map<Agent | undefined, Layer>()
  private agentsByName = new Map<string, Agent>()
  /** the agents' views (the global one is `globalView`) */
  private views = new Map<Agent, View>()
  /** the global view, which most calls read (three times each): kept apart from the map */
  private globalView: View | undefined
  /** what runs: the execution pipeline, asking this registry what is visible */
  private pipeline: Pipeline
  private _generation = 0
  private runCode: CompiledTool
  private codeMode: CodeMode
  /** the executing half of this registry, for hot callers: hold it, and calls skip cordis' contexts altogether */
  readonly executor: Executor
  /** the deployment's listeners, per event and agent, as the pipeline and change notices read them */
  private listeners: ListenerIndex
  private services = new Map<string, unknown>()
  /** the calling plugin's context, when a method is reached through `someCtx.tools` */
  declare protected caller?: Context

  declare config: ToolRuntime.Config
  /** which plugins of the deployment are not in force; while an essential one is not, no tool runs */
  private health: DeploymentHealth
  private deadlines: { preExecuteMs: number; postExecuteMs: number; approvalMs: number }
  /** the run_code programs waiting on a person now, against maxWaitingPrograms */
  private waits = new WaitTally(() => this.config.maxWaitingPrograms)

  constructor(ctx: Context, config: ToolRuntime.ConfigInput = {}) {
    super(ctx, 'tools', true)
    this.config = ToolRuntime.Config(config)
    this.deadlines = {
      preExecuteMs: this.config.preExecuteTimeoutMs,
      postExecuteMs: this.config.postExecuteTimeoutMs,
      approvalMs: this.config.approvalTimeoutMs,
    }
    // read the caller's context under its own name: tracing it as `ctx` would build a shadow context on every access
    traceCallerAs(this, 'caller')
    const listeners = (this.listeners = new ListenerIndex(ctx))
    // read on every nested call: the lists the index keeps per event and agent, not the hook table, a dictionary whose
    // keyed lookups V8 does not cache (two a call, 330 of a nested call's ~9,500 instructions under callgrind)
    const callStart = listeners.event('code/call-start')
    const callSettle = listeners.event('code/call-settle')
    const journal = listeners.event('code/journal')
    const resume = listeners.event('code/resume')
    // a service lookup through a cordis context costs tens of µs; remember it until that service changes
    ctx.on('internal/service', (name: string) => void this.services.delete(name))
    this.layers.set(undefined, { tools: new Map(), guards: [], masks: [], modes: [], sdks: [] })
    const { nonEssential, startGraceMs } = this.config
    this.health = new DeploymentHealth(ctx.root, () => ({ nonEssential, startGraceMs }))
    this.health.watch(ctx)
    this.codeMode = createRunCode({
      config: this.config,
      codeRuntime: () => this.service('codeRuntime'),
      waits: this.waits,
      prepare: (input, parsed) => this.pipeline.prepare(input, parsed),
      jsonOf: (value) => this.pipeline.jsonOf(value),
      observesNested: (agent) => callStart.for(agent).length > 0 || callSettle.for(agent).length > 0,
      notify: (event, agent, payload) => this.pipeline.notify(event, agent, payload),
      journal: (event) => {
        const listeners = journal.for(event.agent)
        emitEach(listeners, [event], (plugin, error) => this.log().warn('a code/journal listener of plugin "%s" threw (ignored): %s', plugin, messageOf(error)))
        return listeners.length > 0
      },
      recorded: (exec) => {
        for (const answer of dispatch(resume.for(exec.agent), [exec])) {
          if (answer.failed) throw answer.error
          if (answer.value !== undefined && answer.value !== null) return answer.value
        }
      },
      programTools: (agent) => this.programTools(agent),
      sdkTools: (agent) => this.sdkTools(agent),
      sdkDeclarations: (agent) => this.sdkDeclarations(agent),
      sdkPresentation: (agent) => this.view(agent).sdkPresentation,
      catalog: (agent) => this.catalog(agent),
    })
    this.pipeline = new Pipeline({
      view: (agent) => this.view(agent),
      guards: (level) => this.layers.get(level)?.guards,
      service: (name) => this.service(name),
      checkAgent: (agent, method) => this.checkAgent(agent, method),
      log: () => this.log(),
      deadlines: () => this.deadlines,
      routeMessage: (name, declared) => this.codeMode.routeMessage(name, declared),
      listeners,
      health: this.health,
    })
    const pipeline = this.pipeline
    this.executor = Object.freeze({
      execute: (input) => pipeline.execute(input),
      executionMode: (input) => this.executionMode(input),
      prepare: (input) => pipeline.prepare(input),
    } satisfies Executor)
    this.runCode = compileTool(this.codeMode.definition, { plugin: 'core', transport: true, resultChars: this.config.resultChars })
  }

  /** increases whenever what any agent sees may have changed */
  get generation() {
    return this._generation
  }

  private log() {
    return this.ctx.root.logger('tools')
  }

  /**
   * the plugin loads of the deployment that are not in force — failed to start, or waiting for a service — whether
   * each closes the deployment (`essential`), and why. empty when every plugin is in force
   */
  faults(): PluginFault[] {
    return this.health.list()
  }

  // ---- agents and layers

  /** called by createAgent */
  [kAddAgent](agent: Agent) {
    const caller = this.caller ?? this.ctx
    return caller.effect(() => {
      if (this.agentsByName.has(agent.name)) throw new TypeError(`createAgent: an agent named "${agent.name}" already exists; agent names are unique`)
      this.agentsByName.set(agent.name, agent)
      this.layers.set(agent, { tools: new Map(), guards: [], masks: [], modes: [], sdks: [] })
      this.changed()
      return () => {
        agent.disposed = true
        this.agentsByName.delete(agent.name)
        this.layers.delete(agent)
        this.changed()
      }
    })
  }

  /** the run_code programs whose wall clock is stopped now, a nested call of each waiting on a person, for the inspector */
  waitingPrograms(): WaitingPrograms {
    return this.waits.snapshot()
  }

  /** every live agent, in creation order */
  agents(): Agent[] {
    return [...this.agentsByName.values()]
  }

  agent(name: string): Agent | undefined {
    return this.agentsByName.get(name)
  }

  private layerOf(agent: Agent | undefined, method: string): Layer {
    const layer = this.layers.get(agent)
    if (!layer) throw new TypeError(`tools.${method}: ${agent} has been disposed`)
    return layer
  }

  private changed() {
    this._generation++
    this.views.clear()
    this.globalView = undefined
    // each listener isolated from the others, as observers of calls are: cordis' emit stops at the first that throws,
    // so the listeners after it never heard of the change (an MCP server's tool list, the inspector's view), and the
    // throw left register's effect before it returned its disposer: the tool stayed, and nothing could dispose it
    // (every listener of the deployment, unfiltered, as cordis' emit without a scope)
    const listeners = this.listeners.event('tools/changed').for(EVERY_AGENT)
    emitEach(listeners, [this._generation], (plugin, error) => this.changeFailed(plugin, error))
  }

  private changeFailed(plugin: string, error: unknown) {
    // a change made while the deployment stops may find its logger gone: the warning is lost, never thrown in its place
    try {
      this.log().warn('a tools/changed listener of plugin "%s" threw (ignored): %s', plugin, messageOf(error))
    } catch {}
  }

  private checkAgent(agent: Agent | undefined, method: string) {
    if (agent === undefined) return
    if (!(agent instanceof Agent)) throw new TypeError(`tools.${method}: agent must be an Agent made by createAgent, got ${typeof agent}`)
    if (agent.disposed || !this.layers.has(agent)) throw new TypeError(`tools.${method}: ${agent} has been disposed`)
  }

  // ---- registration (each returns a disposer tied to the caller's plugin)

  register(definition: ToolDefinition): () => void {
    const caller = this.caller ?? this.ctx
    const agent = agentOf(caller)
    const plugin = pluginName(caller)
    const compiled = compileTool(definition, { owner: agent, plugin, resultChars: this.config.resultChars })
    return caller.effect(() => {
      const layer = this.layerOf(agent, 'register')
      const existing = layer.tools.get(compiled.info.name)
      if (existing) {
        const where = agent ? `on ${agent}` : 'globally'
        throw new TypeError(`tool "${compiled.info.name}" is already registered ${where} by plugin "${existing.plugin}"; pick another name or dispose it first`)
      }
      const entry = { value: compiled, plugin }
      layer.tools.set(compiled.info.name, entry)
      this.changed()
      return () => {
        if (layer.tools.get(compiled.info.name) === entry) layer.tools.delete(compiled.info.name)
        this.changed()
      }
    })
  }

  /** keeps `entry` in one list of the agent's layer for as long as the calling plugin lives */
  private addToLayer<K extends 'guards' | 'masks' | 'modes' | 'sdks'>(
    caller: Context,
    agent: Agent | undefined,
    method: string,
    list: K,
    entry: Layer[K][number],
    changes = true,
  ): () => void {
    return caller.effect(() => {
      const entries = this.layerOf(agent, method)[list] as Layer[K][number][]
      entries.push(entry)
      if (changes) this.changed()
      return () => {
        entries.splice(entries.indexOf(entry) >>> 0, 1)
        if (changes) this.changed()
      }
    })
  }

  /** an agent-scoped method's caller and the agent it is inside; throws, naming the method, for a caller outside any agent */
  private agentCaller(method: string, hint = ''): { caller: Context; agent: Agent } {
    const caller = this.caller ?? this.ctx
    const agent = agentOf(caller)
    if (!agent) throw new TypeError(`tools.${method} is agent-scoped: call it through agent.ctx${hint}`)
    return { caller, agent }
  }

  /** agent-scoped: the mode for this agent and its descendants, over the deployment default */
  presentAs(mode: Mode): () => void {
    const { caller, agent } = this.agentCaller('presentAs', '; set the deployment default with the `mode` config')
    if (mode !== 'native' && mode !== 'code' && mode !== 'both')
      throw new TypeError(`tools.presentAs: mode must be "native", "code" or "both", got ${JSON.stringify(mode)}`)
    const entry = { value: mode, plugin: pluginName(caller) }
    return this.addToLayer(caller, agent, 'presentAs', 'modes', entry)
  }

  /** agent-scoped: how the SDK is shown to this agent and its descendants, over the deployment's `sdk` */
  presentSdk(presentation: SdkPresentation): () => void {
    const { caller, agent } = this.agentCaller('presentSdk', '; set the deployment default with the `sdk` config')
    if (presentation !== 'full' && presentation !== 'index' && presentation !== 'auto')
      throw new TypeError(`tools.presentSdk: pass "full", "index" or "auto", got ${JSON.stringify(presentation)}`)
    const entry = { value: presentation, plugin: pluginName(caller) }
    return this.addToLayer(caller, agent, 'presentSdk', 'sdks', entry)
  }

  /** agent-scoped mask over inherited tools; masks intersect */
  restrict(mask: Mask): () => void {
    const { caller, agent } = this.agentCaller('restrict')
    const names = 'allow' in (mask ?? {}) ? (mask as { allow: string[] }).allow : (mask as { deny?: string[] })?.deny
    if (!Array.isArray(names) || names.some((n) => typeof n !== 'string') || ('allow' in mask && 'deny' in mask)) {
      throw new TypeError('tools.restrict: pass either { allow: string[] } or { deny: string[] }')
    }
    if (names.includes(RUN_CODE)) throw new TypeError(`tools.restrict: "${RUN_CODE}" cannot be restricted; change the mode with presentAs instead`)
    const visible = this.view(agent).tools
    const unknown = names.filter((n) => !visible.has(n))
    if (unknown.length) {
      throw new TypeError(
        `tools.restrict: ${unknown.map((n) => `"${n}"`).join(', ')} ${unknown.length > 1 ? 'are' : 'is'} not visible to ${agent}; restrict only tools it can see`,
      )
    }
    const entry = { value: 'allow' in mask ? { allow: [...names] } : { deny: [...names] }, plugin: pluginName(caller) }
    return this.addToLayer(caller, agent, 'restrict', 'masks', entry)
  }

  /** `ctx.on(event, listener, options)` for the pipeline's events, checked: a listener function and a pipeline event */
  listen<K extends PipelineEvent>(event: K, listener: Events[K], options: { prepend?: boolean } = {}): () => void {
    if (typeof listener !== 'function') throw new TypeError(`tools.listen: pass a listener function for "${event}"`)
    if (!PIPELINE_EVENTS.includes(event)) throw new TypeError(`tools.listen: "${event}" is not a pipeline event; use ctx.on for it`)
    const dispose = (this.caller ?? this.ctx).on(event, listener, options)
    return () => void dispose()
  }

  /** a synchronous, monotonic guard on the caller's layer (global or agent) */
  guard(guard: Guard): () => void {
    const caller = this.caller ?? this.ctx
    if (typeof guard !== 'function') throw new TypeError('tools.guard: pass a function (exec) => reason | undefined')
    const agent = agentOf(caller)
    const entry = { value: guard, plugin: pluginName(caller) }
    // guards are read per call, not through views: adding one changes nothing a view holds
    return this.addToLayer(caller, agent, 'guard', 'guards', entry, false)
  }

  // ---- views (computed once per generation and agent)

  private view(agent: Agent | undefined): View {
    let view = agent ? this.views.get(agent) : this.globalView
    if (view) return view
    const chain = agent?.lineage ?? []
    const tools = new Map<string, CompiledTool>()
    const owners = new Map<string, Agent | undefined>()
    const masked = new Map<string, Agent>()
    const shadows = new Map<string, { by: Agent | undefined; hidden: Agent | undefined }>()
    for (const [name, entry] of this.layers.get(undefined)!.tools) {
      tools.set(name, entry.value)
      owners.set(name, undefined)
    }
    let mode: Mode = this.config.mode
    let modeFrom: Agent | undefined
    let sdkPresentation = this.config.sdk
    for (const level of chain) {
      const layer = this.layers.get(level)
      if (!layer) continue
      for (const { value: mask } of layer.masks) {
        for (const name of [...tools.keys()]) {
          const keep = 'allow' in mask ? mask.allow.includes(name) : !mask.deny.includes(name)
          if (keep) continue
          tools.delete(name)
          masked.set(name, level)
        }
      }
      for (const [name, entry] of layer.tools) {
        if (tools.has(name)) shadows.set(name, { by: level, hidden: owners.get(name) })
        tools.set(name, entry.value)
        owners.set(name, level)
        masked.delete(name)
      }
      const present = layer.modes.at(-1)
      if (present) {
        mode = present.value
        modeFrom = level
      }
      sdkPresentation = layer.sdks.at(-1)?.value ?? sdkPresentation
    }
    if (mode !== 'native') tools.set(RUN_CODE, this.runCode)
    view = { mode, modeFrom, tools, masked, shadows, sdkPresentation }
    if (agent) this.views.set(agent, view)
    else this.globalView = view
    return view
  }

  get(name: string, agent?: Agent): ToolInfo | undefined {
    this.checkAgent(agent, 'get')
    return this.view(agent).tools.get(name)?.info
  }

  schemas(agent?: Agent): readonly ToolSchema[] {
    this.checkAgent(agent, 'schemas')
    const view = this.view(agent)
    view.schemas ??= Object.freeze(
      [...view.tools.values()]
        .map((tool) => Object.freeze({ name: tool.info.name, description: tool.info.description, parameters: tool.parameters }))
        .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    )
    return view.schemas
  }

  modeFor(agent?: Agent): Mode {
    this.checkAgent(agent, 'modeFor')
    return this.view(agent).mode
  }

  /** the effective mode and the agent whose presentAs set it (none: the deployment default) */
  modeOrigin(agent?: Agent): ModeOrigin {
    this.checkAgent(agent, 'modeOrigin')
    const view = this.view(agent)
    return { mode: view.mode, from: view.modeFrom }
  }

  /** what masks and shadows did to this agent's view, for inspection */
  visibility(agent?: Agent) {
    this.checkAgent(agent, 'visibility')
    const view = this.view(agent)
    return {
      masked: [...view.masked].map(([name, by]) => ({ name, by: by.name })),
      shadows: [...view.shadows].map(([name, s]) => ({ name, by: s.by?.name, hidden: s.hidden?.name ?? 'global' })),
      masks: (agent?.chain() ?? []).flatMap((level) => (this.layers.get(level)?.masks ?? []).map((m) => ({ agent: level.name, ...m.value, plugin: m.plugin }))),
    }
  }

  /** names that a model-direct call from this agent would have collapsed */
  collapsedNames(agent?: Agent): string[] {
    const view = this.view(agent)
    return [...view.tools.keys()].filter((name) => collapses(name, view.mode, false)).sort()
  }

  /** what the model is shown: the wire schemas and the registry's prompt sections */
  wire(agent?: Agent): Wire {
    this.checkAgent(agent, 'wire')
    const view = this.view(agent)
    if (view.wire) return view.wire
    const schemas = this.schemas(agent)
    const tools = schemas.filter((s) => !collapses(s.name, view.mode, false))
    const sections: PromptSection[] = []
    const collapsed = schemas.filter((s) => collapses(s.name, view.mode, false)).map((s) => s.name)
    const sdk = view.mode !== 'native' ? this.codeMode.sdkSection(agent, collapsed.length > 0) : undefined
    const rule = collapsed.length
      ? this.codeMode.codeOnlyRule(
          collapsed.map((name) => view.tools.get(name)!),
          sdk?.indexed ?? false,
        )
      : ''
    sections.push({ id: CODE_ONLY_SECTION, order: CODE_ONLY_ORDER, text: rule })
    if (sdk) sections.push({ id: SDK_SECTION, order: SDK_ORDER, text: sdk.text })
    view.wire = Object.freeze({ mode: view.mode, tools: Object.freeze(tools), sections: Object.freeze(sections.map((s) => Object.freeze(s))) })
    return view.wire
  }

  // ---- execution

  executionMode(input: Pick<ExecutionInput, 'name' | 'arguments' | 'agent' | 'parent'>): ExecutionMode {
    try {
      return this.pipeline.prepare(input).mode
    } catch {
      return 'exclusive'
    }
  }

  /** runs one call through the whole pipeline; resolves with exactly one result and never rejects for a tool's failure */
  execute(input: ExecutionInput): Promise<ToolResult> {
    return this.pipeline.execute(input)
  }

  /** the services the pipeline consults (approval, codeRuntime), looked up on the root context */
  private service<K extends 'approval' | 'codeRuntime'>(name: K): Context[K] | undefined {
    if (!this.services.has(name)) this.services.set(name, this.ctx.root.get(name))
    return this.services.get(name) as Context[K] | undefined
  }

  /** the binding names a program of this agent gets: everything it can see but run_code, and the helpers */
  private programTools(agent: Agent | undefined): string[] {
    return [...PROGRAM_HELPERS, ...this.sdkTools(agent).map((tool) => tool.name)]
  }

  /** what the SDK renderers read for this agent: every tool it can see but run_code, sorted by name */
  private sdkTools(agent: Agent | undefined): SdkTool[] {
    const view = this.view(agent)
    view.sdkTools ??= this.schemas(agent)
      .filter((schema) => bindable(schema.name))
      .map((schema) => view.tools.get(schema.name)!)
      .map((tool) => ({
        name: tool.info.name,
        description: tool.info.description,
        parameters: tool.parameters,
        output: tool.output,
        rendered: tool.rendered,
      }))
    return view.sdkTools
  }

  /** what tools.$search and tools.$describe read for this agent; built once per generation */
  private catalog(agent: Agent | undefined): Catalog {
    const view = this.view(agent)
    view.catalog ??= new Catalog(this.sdkTools(agent))
    return view.catalog
  }

  /** the complete TypeScript declarations of the SDK this agent's programs get; rendered once per generation */
  sdkDeclarations(agent?: Agent): string {
    this.checkAgent(agent, 'sdkDeclarations')
    const view = this.view(agent)
    view.sdk ??= renderSdk(this.sdkTools(agent))
    return view.sdk
  }
}

namespace ToolRuntime {
  export interface Config {
    mode: Mode
    maxParallelSubCalls: number
    /** type-check run_code programs against the SDK before running them */
    typecheck: boolean
    codeLimits: Partial<CodeRunLimits>
    /** how the SDK is shown in the prompt */
    sdk: SdkPresentation
    /** under `auto`, the most tokens (estimated as characters / 4) the SDK section may take before an index replaces it */
    sdkBudget: number
    /** the most characters of a result's model-facing content; longer content is cut with a note saying so */
    resultChars: number
    /** a tools/pre-execute listener that has not answered by then fails closed */
    preExecuteTimeoutMs: number
    /** a tools/post-execute listener that has not answered by then fails closed: the result is withheld */
    postExecuteTimeoutMs: number
    /** an approval request with no answer by then is denied */
    approvalTimeoutMs: number
    /** run_code programs whose wall clock may stop at once while a nested call waits on a person */
    maxWaitingPrograms: number
    /** ms a program waits on a person before it is checkpointed (its sandbox unit given back); 0: never */
    checkpointAfterMs: number
    /** the most bytes of calls and results a program's journal holds; past it the program is not checkpointed */
    maxCheckpointBytes: number
    /** plugins (by name) whose failure to start leaves the deployment in force; every other one stops all calls */
    nonEssential: string[]
    /** how long a plugin may wait for a required service once the deployment has started; calls wait meanwhile */
    startGraceMs: number
  }

  /** what a deployer writes: every key optional, limits partial */
  export type ConfigInput = Partial<Omit<Config, 'codeLimits'>> & { codeLimits?: Partial<CodeRunLimits> }

  /** how long a plugin may wait for a service it requires once the deployment has started (`startGraceMs`) */
  export const START_GRACE_MS = 5_000

  export const SDK_BUDGET = 6000

  export const Config = defineConfig<Config, ConfigInput>()(
    Schema.object({
      mode: Schema.union(['native', 'code', 'both'] as const)
        .default('native')
        .description('how tools are shown to the model: native function calls, code (run_code + a typed SDK), or both'),
      maxParallelSubCalls: Schema.natural().min(1).default(8).description('concurrency-safe nested calls of one program that may overlap'),
      typecheck: Schema.boolean().default(false).description('type-check run_code programs against the SDK before running them'),
      sdk: Schema.union(['auto', 'full', 'index'] as const)
        .default('auto')
        .description('how the SDK is shown: every declaration (full), a compact index (index), or full while it fits sdkBudget (auto)'),
      sdkBudget: Schema.natural()
        .min(1)
        .default(SDK_BUDGET)
        .description('auto: the most tokens (characters / 4) the SDK section may take in full; above it the model gets an index'),
      resultChars: Schema.natural()
        .min(256)
        .default(RESULT_CHARS)
        .description("the most characters of a result's content shown to the model; the rest is cut with a note"),
      codeLimits: CodeRunLimitsSchema.default({}).description("overrides of the code runtime's own limits for every run_code program"),
      preExecuteTimeoutMs: Schema.natural()
        .min(1)
        .default(30_000)
        .description('a tools/pre-execute listener that has not answered by then fails closed: the call is DENIED'),
      postExecuteTimeoutMs: Schema.natural()
        .min(1)
        .default(30_000)
        .description('a tools/post-execute listener that has not answered by then fails closed: the call is DENIED, its result withheld'),
      approvalTimeoutMs: Schema.natural()
        .min(1)
        .default(15 * 60_000)
        .description("an approval request with no answer by then is DENIED; the approval plugin's own deadlines are usually shorter"),
      maxWaitingPrograms: Schema.natural()
        .default(64)
        .description(
          'run_code programs whose wall clock may stop at once while a nested call waits on a person (each holds its sandbox unit meanwhile); past it, the clock runs on',
        ),
      checkpointAfterMs: Schema.natural()
        .default(30_000)
        .description(
          'a program waiting on a person longer than this is checkpointed: its sandbox unit is given back, and it runs again from its journal once answered; 0: never',
        ),
      maxCheckpointBytes: Schema.natural()
        .default(16 * 1024 * 1024)
        .description(
          "the most bytes of a program's calls and results kept to run it again after a checkpoint; past it the program keeps its unit while it waits",
        ),
      nonEssential: Schema.array(Schema.string())
        .default([])
        .description('plugins (by name) that may fail to start, or wait for a service, while tools still run; any other such plugin stops every call'),
      startGraceMs: Schema.natural()
        .min(1)
        .default(START_GRACE_MS)
        .description(
          'how long a plugin may wait for a service it requires once the deployment has started; calls wait meanwhile, then end as DEPLOYMENT_FAILED',
        ),
    }),
  )
}

// the config schema's first resolve in a process walks cold code (schemastery's and the strict checks): 1.3-2 ms, where
// a later one takes 0.2 ms. done once here as the module loads (importing the core takes some 250 ms under tsx), the
// first context set up in the process does not pay it
ToolRuntime.Config({})

export default ToolRuntime
export { ToolRuntime }
