// the report: plain JSON built on demand from the live runtime (the adapter for cordis, ctx.tools for
// agents and tools) plus what the inspector recorded (the call trace, recent disposals).

import {
  type Agent,
  agentOf,
  type CodeRuntime,
  type CodeRuntimeLoad,
  type Json,
  type Listener,
  listenersFor,
  pluginName,
  RUN_CODE,
  type ToolRuntime,
  type WaitingPrograms,
} from '@faber/core'
import type { Context } from 'cordis'
import { listeners, type PluginState, pluginTree, type ScopeNode, serviceSlots } from './cordis-adapter.ts'
import { maskConfig } from './mask.ts'
import type { CallRecord } from './trace.ts'

export interface PluginReport {
  name: string
  state: PluginState
  error?: string
  waitingFor?: string[]
  /** the agent whose context it was loaded on */
  agent?: string
  reusable?: boolean
  /** the config it was loaded with, secrets masked; only in reports built with `configs: true` (the web view's) */
  config?: Json
  children: PluginReport[]
}

/** a plugin load that is not running: nothing it would enforce (a policy, say) is in force */
export interface InactivePluginReport {
  name: string
  state: 'pending' | 'failed'
  /** why: the error, or the services it waits for */
  reason: string
  agent?: string
}

export interface DisposedPluginReport {
  name: string
  /** the plugin it had been loaded by */
  loadedBy: string
  agent?: string
  /** ISO time of the disposal */
  at: string
}

export interface ServiceReport {
  name: string
  provider: string
  /** the agent whose context provided it */
  agent?: string
  isolated: boolean
  /**
   * for the code runtime: its backend, the programs running under its cap and the runs queued behind it, and those of
   * the running programs that wait on a person (each holds its place under the cap and its sandbox unit meanwhile),
   * and the programs checkpointed while they wait (holding neither)
   */
  load?: CodeRuntimeLoad & { backend: string; waiting: WaitingPrograms }
}

export interface ListenerReport {
  plugin: string
  /** set for a listener registered through an agent's context: it sees that agent's calls only */
  agent?: string
  prepend?: boolean
}

export interface EventReport {
  event: string
  listeners: ListenerReport[]
}

export interface ToolEntry {
  name: string
  /** `global`, the agent whose layer registered it, or `core` for run_code */
  owner: string
  /** the plugin that registered it */
  plugin: string
  /** what the tool says about how it runs (its `status` annotation), e.g. whether a shell is confined */
  status?: string
}

export interface ToolsReport {
  /** null for the global layer */
  agent: string | null
  mode: 'native' | 'code' | 'both'
  /** where the mode came from: the deployment default, this agent's presentAs, or an ancestor's */
  modeFrom: 'default' | 'self' | 'ancestor'
  /** the agent whose presentAs set it, when it was an ancestor */
  modeAgent?: string
  /** what the agent can see (`schemas`), sorted */
  visible: ToolEntry[]
  /** the tool schemas the model is shown (`wire`) */
  wire: string[]
  /** the non-empty prompt sections the registry contributes */
  sections: string[]
  /** names a model-direct call would collapse (reach them inside run_code) */
  collapsed: string[]
  masked: { name: string; by: string }[]
  shadows: { name: string; by?: string; hidden: string }[]
  masks: ({ agent: string; plugin: string } & ({ allow: string[] } | { deny: string[] }))[]
}

export interface AgentReport {
  name: string
  parent: string | null
  /** the agent, its parent, ... up to its root agent */
  chain: string[]
  /** the plugin that created it */
  createdBy: string
  /** per event, the listeners registered through agents that hear this agent's calls (its own and its ancestors'), in dispatch order */
  listeners: EventReport[]
}

/** a plugin load the runtime counts as not in force (see @faber/core's `ctx.tools.faults()`) */
export interface FaultReport {
  plugin: string
  state: 'failed' | 'waiting' | 'starting'
  reason: string
  /** false when declared in the runtime's `nonEssential`: reported, but calls run */
  essential: boolean
  missing?: string[]
}

export interface Report {
  /** whether tools run: false while an essential plugin is not in force, when every call ends as DEPLOYMENT_FAILED */
  deployment: { inForce: boolean; faults: FaultReport[] }
  plugins: PluginReport
  /** every loaded plugin that is not active (failed, or waiting for a service), flagged */
  inactive: InactivePluginReport[]
  disposed: DisposedPluginReport[]
  services: ServiceReport[]
  events: EventReport[]
  agents: AgentReport[]
  /** the global layer first, then every agent in creation order */
  tools: ToolsReport[]
  calls: CallRecord[]
  /** false when no inspector is loaded: calls are then not recorded */
  tracing: boolean
}

export interface ReportSources {
  calls?: CallRecord[]
  disposed?: DisposedPluginReport[]
  /** the tool view of one layer; the inspector passes one cached per tool-set generation */
  tools?: (agent: Agent | undefined) => ToolsReport
  /** include each plugin's config, secrets masked */
  configs?: boolean
}

function plugin(node: ScopeNode, configs = false): PluginReport {
  const report: PluginReport = { name: node.name, state: node.state, children: node.children.map((child) => plugin(child, configs)) }
  if (node.error !== undefined) report.error = node.error
  if (node.waitingFor) report.waitingFor = node.waitingFor
  const agent = agentOf(node.context)
  if (agent) report.agent = agent.name
  if (node.reusable) report.reusable = true
  if (configs && node.config !== undefined) report.config = maskConfig(node.config)
  return report
}

function inactive(node: PluginReport, into: InactivePluginReport[] = []): InactivePluginReport[] {
  for (const child of node.children) {
    if (child.state === 'failed' || child.state === 'pending') {
      const reason =
        child.state === 'failed'
          ? `failed: ${child.error ?? 'unknown error'}`
          : child.waitingFor
            ? `waiting for ${child.waitingFor.join(', ')}, which no loaded plugin provides`
            : 'not started yet'
      const entry: InactivePluginReport = { name: child.name, state: child.state, reason }
      if (child.agent) entry.agent = child.agent
      into.push(entry)
    }
    inactive(child, into)
  }
  return into
}

/** the tool view of one layer (undefined: the global one) */
export function toolsOf(tools: ToolRuntime, agent: Agent | undefined): ToolsReport {
  const origin = tools.modeOrigin(agent)
  const wire = tools.wire(agent)
  const visibility = tools.visibility(agent)
  const report: ToolsReport = {
    agent: agent?.name ?? null,
    mode: origin.mode,
    modeFrom: origin.from === undefined ? 'default' : origin.from === agent ? 'self' : 'ancestor',
    visible: tools.schemas(agent).map(({ name }) => {
      const info = tools.get(name, agent)
      const entry: ToolEntry = { name, owner: name === RUN_CODE ? 'core' : (info?.owner?.name ?? 'global'), plugin: info?.plugin ?? 'core' }
      const status = info?.annotations.status
      if (typeof status === 'string') entry.status = status
      return entry
    }),
    wire: wire.tools.map((tool) => tool.name),
    sections: wire.sections.filter((section) => section.text).map((section) => section.id),
    collapsed: tools.collapsedNames(agent),
    masked: visibility.masked,
    shadows: visibility.shadows,
    masks: visibility.masks,
  }
  if (report.modeFrom === 'ancestor') report.modeAgent = origin.from!.name
  return report
}

function agentReport(root: Context, agent: Agent, events: Map<string, Map<Listener, ListenerReport>>): AgentReport {
  const listeners: EventReport[] = []
  for (const [event, reports] of events) {
    // core decides which listeners hear the agent; the global layer's are listed once, under events
    const scoped = listenersFor(root, event, agent).flatMap((hook) => {
      const report = reports.get(hook)
      return report?.agent === undefined ? [] : [report]
    })
    if (scoped.length) listeners.push({ event, listeners: scoped })
  }
  listeners.sort((a, b) => (a.event < b.event ? -1 : 1))
  return {
    name: agent.name,
    parent: agent.parent?.name ?? null,
    chain: agent.chain().map((a) => a.name),
    createdBy: pluginName(agent.ctx),
    listeners,
  }
}

/** the whole report, built now from the live runtime */
export function buildReport(ctx: Context, sources: ReportSources = {}): Report {
  const root = ctx.root
  const events = new Map<string, Map<Listener, ListenerReport>>()
  for (const entry of listeners(root)) {
    const listener: ListenerReport = { plugin: entry.plugin }
    if (entry.agent) listener.agent = entry.agent.name
    if (entry.prepend) listener.prepend = true
    let list = events.get(entry.event)
    if (!list) events.set(entry.event, (list = new Map()))
    list.set(entry.listener, listener)
  }
  const tools = root.get('tools')
  if (!tools) throw new TypeError('inspect: no ToolRuntime is mounted at ctx.tools; load @faber/core first')
  const agents = tools.agents()
  const plugins = plugin(pluginTree(root), sources.configs)
  const faults = tools.faults().map(({ plugin, state, reason, essential, missing }) => {
    const fault: FaultReport = { plugin, state, reason, essential }
    if (missing) fault.missing = [...missing]
    return fault
  })
  return {
    deployment: { inForce: !faults.some((fault) => fault.essential), faults },
    plugins,
    inactive: inactive(plugins),
    disposed: sources.disposed ?? [],
    services: serviceSlots(root).map((slot) => {
      const service: ServiceReport = { name: slot.name, provider: slot.provider, isolated: slot.isolated }
      const agent = slot.context && agentOf(slot.context)
      if (agent) service.agent = agent.name
      if (slot.name === 'codeRuntime') {
        const runtime = root.get('codeRuntime') as CodeRuntime | undefined
        const load = runtime?.load?.()
        if (runtime && load) service.load = { backend: runtime.backend, ...load, waiting: tools.waitingPrograms() }
      }
      return service
    }),
    events: [...events]
      .filter(([, list]) => list.size)
      .map(([event, list]) => ({ event, listeners: [...list.values()] }))
      .sort((a, b) => (a.event < b.event ? -1 : 1)),
    agents: agents.map((agent) => agentReport(root, agent, events)),
    tools: [undefined, ...agents].map((agent) => (sources.tools ? sources.tools(agent) : toolsOf(tools, agent))),
    calls: sources.calls ?? [],
    tracing: sources.calls !== undefined,
  }
}
