// narrowing the report to one section (`what` and an optional `name`) and rendering it as compact text
// for a model or a terminal. the JSON and the text are made from the same selection.

import type { AgentReport, EventReport, PluginReport, Report, ServiceReport, ToolsReport } from './report.ts'
import type { CallRecord } from './trace.ts'

export const SECTIONS = ['plugins', 'services', 'tools', 'events', 'calls', 'agent'] as const
export type What = (typeof SECTIONS)[number]

export interface Selection {
  what: What
  name?: string
  /** JSON-serializable */
  data: unknown
  text: string
}

const GLOBAL = 'global'

function matches(text: string, name: string) {
  return text.toLowerCase().includes(name.toLowerCase())
}

function list(names: readonly string[]) {
  return names.length ? names.join(', ') : 'none'
}

// ---- plugins

function prune(node: PluginReport, name: string): PluginReport | undefined {
  if (matches(node.name, name)) return node
  const children = node.children.map((child) => prune(child, name)).filter((child) => child !== undefined)
  return children.length ? { ...node, children } : undefined
}

function countPlugins(node: PluginReport, into = { loads: 0, failed: 0, pending: 0 }) {
  for (const child of node.children) {
    into.loads++
    if (child.state === 'failed') into.failed++
    if (child.state === 'pending') into.pending++
    countPlugins(child, into)
  }
  return into
}

function pluginLines(node: PluginReport, depth: number, lines: string[]) {
  let state: string = node.state
  if (node.state === 'failed') state = `FAILED: ${node.error ?? 'unknown error'}`
  if (node.waitingFor) state += `, waiting for ${node.waitingFor.join(', ')}`
  const on = node.agent ? ` on agent ${node.agent}` : ''
  lines.push(`${'  '.repeat(depth)}- ${node.name} [${state}]${on}`)
  for (const child of node.children) pluginLines(child, depth + 1, lines)
}

function plugins(report: Report, name?: string): Selection {
  const tree = name ? prune(report.plugins, name) : report.plugins
  const disposed = name ? report.disposed.filter((d) => matches(d.name, name)) : report.disposed
  const lines: string[] = []
  if (!tree) {
    lines.push(`no loaded plugin matches "${name}"`)
  } else {
    const counts = countPlugins(report.plugins)
    lines.push(`plugins: ${counts.loads} loaded, ${counts.failed} failed, ${counts.pending} pending${name ? ` (showing those matching "${name}")` : ''}`)
    lines.push(...deploymentLines(report))
    for (const entry of report.inactive.filter((e) => !name || matches(e.name, name))) {
      lines.push(`NOT ACTIVE: ${entry.name}${entry.agent ? ` on agent ${entry.agent}` : ''} (${entry.reason}); nothing it enforces is in force`)
    }
    pluginLines(tree, 0, lines)
  }
  if (disposed.length) {
    lines.push('recently disposed:')
    for (const d of disposed) lines.push(`- ${d.name} (loaded by ${d.loadedBy}${d.agent ? ` on agent ${d.agent}` : ''}) at ${d.at}`)
  }
  const inactive = name ? report.inactive.filter((e) => matches(e.name, name)) : report.inactive
  return { what: 'plugins', name, data: { plugins: tree ?? null, inactive, disposed }, text: lines.join('\n') }
}

// ---- services

function services(report: Report, name?: string): Selection {
  const selected = name ? report.services.filter((s) => matches(s.name, name) || matches(s.provider, name)) : report.services
  const lines = [name ? `services matching "${name}" (${selected.length}):` : `services (${selected.length}):`]
  for (const s of selected) lines.push(`- ${serviceLine(s)}`)
  return { what: 'services', name, data: selected, text: lines.join('\n') }
}

function serviceLine(s: ServiceReport) {
  const load = s.load
    ? ` [${s.load.backend}: ${s.load.running}/${s.load.maxConcurrent} running (${s.load.waiting.waiting}/${s.load.waiting.maxWaiting} of them waiting on a person), ${s.load.queued} queued, ${s.load.waiting.checkpointed} checkpointed]`
    : ''
  return `${s.name} ← ${s.provider}${s.agent ? ` on agent ${s.agent}` : ''}${s.isolated ? ' (isolated)' : ''}${load}`
}

// ---- events

function events(report: Report, name?: string): Selection {
  const selected = name ? report.events.filter((e) => matches(e.event, name)) : report.events.filter((e) => !e.event.startsWith('internal/'))
  const hidden = report.events.length - selected.length
  const lines = [name ? `events matching "${name}" (${selected.length}):` : `events (${selected.length}, in dispatch order):`]
  for (const e of selected) lines.push(eventLine(e))
  if (!name && hidden) lines.push(`(${hidden} cordis internal events not shown; pass name "internal/" to see them)`)
  return { what: 'events', name, data: selected, text: lines.join('\n') }
}

function eventLine(e: EventReport) {
  const who = e.listeners.map((l) => `${l.plugin}${l.agent ? `@${l.agent}` : ''}${l.prepend ? ' (first)' : ''}`)
  return `- ${e.event}: ${who.join(', ')}`
}

// ---- tools

function layerName(layer: ToolsReport) {
  return layer.agent ?? GLOBAL
}

function modeText(layer: ToolsReport) {
  if (layer.modeFrom === 'default') return `${layer.mode} (deployment default)`
  if (layer.modeFrom === 'self') return `${layer.mode} (this agent's presentAs)`
  return `${layer.mode} (inherited from ${layer.modeAgent}'s presentAs)`
}

function layerLines(layer: ToolsReport, lines: string[], title = layer.agent ? `agent ${layer.agent}` : 'global layer') {
  lines.push(`${title}: mode ${modeText(layer)}`)
  const visible = layer.visible.map((t) => (t.owner === GLOBAL || t.owner === 'core' ? t.name : `${t.name}@${t.owner}`))
  lines.push(`  visible (${visible.length}): ${list(visible)}`)
  lines.push(
    `  shown to the model (${layer.wire.length}): ${list(layer.wire)}${layer.sections.length ? `; prompt sections: ${layer.sections.join(', ')}` : ''}`,
  )
  for (const t of layer.visible) if (t.status) lines.push(`  ${t.name}: ${t.status}`)
  if (layer.collapsed.length) lines.push(`  collapsed for direct calls (reach them inside run_code): ${list(layer.collapsed)}`)
  if (layer.masked.length) lines.push(`  masked: ${layer.masked.map((m) => `${m.name} (by ${m.by})`).join(', ')}`)
  if (layer.shadows.length) lines.push(`  shadows: ${layer.shadows.map((s) => `${s.name} (on ${s.by ?? GLOBAL}, hides ${s.hidden}'s)`).join(', ')}`)
  for (const m of layer.masks) lines.push(`  restrict on ${m.agent} by ${m.plugin}: ${'allow' in m ? `allow ${list(m.allow)}` : `deny ${list(m.deny)}`}`)
}

function tools(report: Report, name?: string, caller?: string): Selection {
  const target = name ?? caller
  const layer = target === undefined ? undefined : report.tools.find((l) => layerName(l) === target)
  if (target === undefined || layer) {
    const layers = layer ? [layer] : report.tools
    const lines: string[] = []
    for (const l of layers) layerLines(l, lines)
    return { what: 'tools', name, data: layers, text: lines.join('\n') }
  }
  // not a layer: a tool name, shown across layers
  const rows = report.tools.map((l) => {
    const entry = l.visible.find((t) => t.name === target)
    return {
      layer: layerName(l),
      visible: !!entry,
      owner: entry?.owner,
      plugin: entry?.plugin,
      wire: l.wire.includes(target),
      collapsed: l.collapsed.includes(target),
      masked: l.masked.find((m) => m.name === target)?.by,
    }
  })
  if (!rows.some((r) => r.visible || r.masked)) {
    const layers = report.tools.map(layerName)
    return { what: 'tools', name, data: [], text: `"${target}" is neither an agent nor a tool anyone can see; layers: ${list(layers)}` }
  }
  const lines = [`tool ${target}:`]
  for (const r of rows) {
    const state = !r.visible
      ? r.masked
        ? `masked (by ${r.masked})`
        : 'not visible'
      : r.collapsed
        ? 'visible, collapsed (inside run_code only)'
        : r.wire
          ? 'visible and shown'
          : 'visible, not shown'
    const where = r.owner !== GLOBAL ? ` on ${r.owner}` : ''
    lines.push(`- ${r.layer}: ${state}${r.visible ? `; registered${where} by plugin ${r.plugin}` : ''}`)
  }
  return { what: 'tools', name, data: rows, text: lines.join('\n') }
}

// ---- calls

function stageText(stage: { stage: string; decision: string; by?: string; reason?: string }) {
  return `${stage.stage} ${stage.decision}${stage.by ? ` by ${stage.by}` : ''}${stage.reason ? ` (${stage.reason})` : ''}`
}

export function callLine(call: CallRecord) {
  const at = call.site ? ` at line ${call.site.line}, column ${call.site.column}` : ''
  const where = call.nested ? `  ↳ in ${call.outerCallId}${at}: ` : ''
  const by = call.error?.deniedBy ?? call.error?.withheldBy
  const outcome = call.outcome === 'ok' ? 'ok' : call.error!.code + (by ? ` by ${by.stage}/${by.plugin}` : '')
  const stages = call.stages.length ? call.stages.map(stageText).join('; ') : call.reachedPolicy ? 'no policy decision (default allow)' : ''
  const detail = call.note ? `${stages ? `${stages}; ` : ''}${call.note}` : stages
  const message = call.outcome === 'error' && !call.error!.deniedBy ? ` — ${call.error!.message}` : ''
  return `#${call.seq} ${where}${call.name} [${call.callId}] ${outcome} ${call.durationMs.toFixed(1)}ms${detail ? ` | ${detail}` : ''}${message}`
}

function calls(report: Report, name?: string, caller?: string): Selection {
  const target = name ?? caller
  let selected = report.calls
  let heading = `recent calls (${report.calls.length}, oldest first)`
  if (target !== undefined) {
    const isLayer = target === GLOBAL || report.agents.some((a) => a.name === target)
    selected = isLayer
      ? report.calls.filter((c) => (c.agent ?? GLOBAL) === target)
      : report.calls.filter((c) => c.name === target || c.callId === target || c.rootCallId === target)
    heading = isLayer
      ? `recent calls of ${target === GLOBAL ? 'the global layer' : `agent ${target}`} (${selected.length}, oldest first)`
      : `recent calls matching "${target}" (${selected.length})`
  }
  const lines = [report.tracing ? heading : 'no call trace: the inspector plugin is not loaded']
  for (const call of selected) lines.push(callLine(call))
  return { what: 'calls', name, data: selected, text: lines.join('\n') }
}

// ---- agent

function agent(report: Report, name?: string, caller?: string): Selection {
  const target = name ?? caller
  const found = target === undefined ? undefined : report.agents.find((a) => a.name === target)
  if (!found) {
    const lines = [target === undefined ? `agents (${report.agents.length}):` : `no agent named "${target}"; agents (${report.agents.length}):`]
    for (const a of report.agents) lines.push(`- ${agentLine(a)}`)
    return { what: 'agent', name, data: report.agents, text: lines.join('\n') }
  }
  const layer = report.tools.find((l) => l.agent === found.name)!
  const listeners = found.listeners
  const ring = report.calls.filter((c) => c.agent === found.name)
  const lines = [`agent ${agentLine(found)}`]
  layerLines(layer, lines, 'tools')
  if (listeners.length) {
    lines.push('listeners scoped to this agent or its ancestors:')
    for (const e of listeners) lines.push(`  ${eventLine(e).slice(2)}`)
  }
  lines.push(`recent calls (${ring.length}):`)
  for (const call of ring.slice(-10)) lines.push(`  ${callLine(call)}`)
  return { what: 'agent', name, data: { agent: found, tools: layer, listeners, calls: ring }, text: lines.join('\n') }
}

function agentLine(a: AgentReport) {
  return `${a.name}${a.parent ? ` (chain ${a.chain.join(' → ')})` : ''}, created by ${a.createdBy}`
}

// ---- entry points

/** one section of the report, narrowed by `name`; `caller` (an agent name) is the default target for tools, calls and agent */
export function select(report: Report, what: What, name?: string, caller?: string): Selection {
  switch (what) {
    case 'plugins':
      return plugins(report, name)
    case 'services':
      return services(report, name)
    case 'tools':
      return tools(report, name, caller)
    case 'events':
      return events(report, name)
    case 'calls':
      return calls(report, name, caller)
    case 'agent':
      return agent(report, name, caller)
  }
  throw new TypeError(`inspect: "what" must be one of ${SECTIONS.join(', ')}, got ${JSON.stringify(what)}`)
}

/** the whole report as text, every section in turn */
/** whether the deployment is in force; when not, which plugin stops every call and why */
function deploymentLines(report: Report): string[] {
  const { inForce, faults } = report.deployment
  const lines = inForce ? [] : ['DEPLOYMENT NOT IN FORCE: no tool runs; every call ends as DEPLOYMENT_FAILED until these are fixed or disposed']
  for (const fault of faults) {
    const label = fault.essential ? (fault.state === 'starting' ? 'STARTING' : 'NOT IN FORCE') : 'NON-ESSENTIAL, NOT IN FORCE'
    lines.push(`${label}: ${fault.plugin} (${fault.state}): ${fault.reason}`)
  }
  return lines
}

export function renderReport(report: Report): string {
  const sections = [plugins(report), services(report), events(report), tools(report), agent(report), calls(report)]
  return sections.map((s) => s.text).join('\n\n')
}

/** cuts text at a line boundary to at most `max` characters, saying so */
export function capText(text: string, max: number): string {
  if (text.length <= max) return text
  const notice = `\n… cut at ${max} characters of ${text.length}; narrow with "name"`
  const room = Math.max(0, max - notice.length)
  const cut = text.lastIndexOf('\n', room)
  return `${text.slice(0, cut > 0 ? cut : room)}${notice}`
}
