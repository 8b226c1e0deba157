// the one place in this package that reads cordis 3.18 internals, for what only an inspector needs: the registry's
// scopes, the service store and the whole listener table. which listeners hear an agent, whose a listener is and which
// plugin a context belongs to come from core's adapter (listenersFor, ownerOf, pluginName), so a cordis upgrade touches
// this file, core's and their specs.

import { type Agent, type Listener, messageOf, ownerOf, pluginName } from '@faber/core'
import { Context } from 'cordis'

export type PluginState = 'pending' | 'loading' | 'active' | 'failed' | 'disposed'

/** one load of a plugin (a cordis fork), with the loads made inside it */
export interface ScopeNode {
  /** cordis' uid of the fork; stable while it lives */
  id: number
  name: string
  state: PluginState
  /** the failure, for a failed load */
  error?: string
  /** required services that are not there yet, for a pending load */
  waitingFor?: string[]
  reusable: boolean
  /** the config it was loaded with, as cordis keeps it (schema defaults applied) */
  config: unknown
  /** the context it was loaded on, to find the agent it belongs to */
  context: Context
  children: ScopeNode[]
}

export interface ServiceSlot {
  name: string
  /** the plugin that set it; `builtin` for what cordis provides itself */
  provider: string
  /** the context that set it, undefined for built-ins */
  context?: Context
  /** true when the slot belongs to a subtree made by `ctx.isolate(name)` */
  isolated: boolean
}

export interface ListenerEntry {
  event: string
  /** the listener, as core's listenersFor hands it out */
  listener: Listener
  plugin: string
  /** the agent whose context registered it; undefined for a global one */
  agent?: Agent
  prepend: boolean
  global: boolean
}

export interface DisposedScope {
  name: string
  /** the context it had been loaded on */
  context: Context
}

// the numbers of cordis' ScopeStatus (a const enum, so not importable under isolatedModules)
const STATES: PluginState[] = ['pending', 'loading', 'active', 'failed', 'disposed']
const FAILED = 3

type AnyScope = {
  uid: number | null
  config?: unknown
  status: number
  error?: unknown
  parent: Context
  runtime: AnyRuntime
  ctx: Context
}

type AnyRuntime = AnyScope & {
  name?: string
  plugin: { name?: string } | null
  isReusable?: boolean
  inject: Record<string, { required: boolean }>
  children: AnyScope[]
}

function runtimeName(runtime: AnyRuntime | undefined): string {
  if (!runtime) return 'anonymous'
  if (!runtime.plugin) return 'root'
  return runtime.name || runtime.plugin.name || 'anonymous'
}

function stateOf(fork: AnyScope): { state: PluginState; error?: string } {
  if (fork.uid === null) return { state: 'disposed' }
  const runtime = fork.runtime
  // a non-reusable plugin runs in its main scope, so that is where its failure is recorded
  const failed = [fork, runtime].find((scope) => scope.status === FAILED || scope.error)
  // core's messageOf: a plugin may have thrown anything, and one failure must not take down the whole tree
  if (failed) return { state: 'failed', error: messageOf(failed.error ?? 'failed') }
  const scope = runtime.isReusable ? fork : runtime
  return { state: STATES[scope.status] ?? 'pending' }
}

/** the live plugin tree, from the root down; each node is one load (`ctx.plugin(...)` call) */
export function pluginTree(ctx: Context): ScopeNode {
  const root = ctx.root
  const nodes = new Map<AnyScope, ScopeNode>()
  const forks: AnyScope[] = []
  for (const runtime of root.registry.values() as Iterable<unknown> as Iterable<AnyRuntime>) {
    if (!runtime.plugin) continue
    for (const fork of runtime.children) forks.push(fork)
  }
  const rootNode: ScopeNode = { id: 0, name: 'root', state: 'active', reusable: false, config: undefined, context: root, children: [] }
  for (const fork of forks) {
    const runtime = fork.runtime
    const { state, error } = stateOf(fork)
    const node: ScopeNode = {
      id: fork.uid ?? -1,
      name: runtimeName(runtime),
      state,
      reusable: !!runtime.isReusable,
      config: fork.config,
      context: fork.parent,
      children: [],
    }
    if (error !== undefined) node.error = error
    if (state === 'pending') {
      const missing = Object.entries(runtime.inject ?? {})
        .filter(([name, meta]) => meta.required && fork.ctx.get(name) == null)
        .map(([name]) => name)
      if (missing.length) node.waitingFor = missing
    }
    nodes.set(fork, node)
  }
  for (const fork of forks) {
    // a non-reusable plugin applies in its main scope, so what it loads hangs off that scope: map it to its first load
    let parent = (fork.parent as unknown as { scope: AnyScope }).scope
    if (parent.runtime === parent) parent = (parent as AnyRuntime).children[0] ?? parent
    ;(nodes.get(parent) ?? rootNode).children.push(nodes.get(fork)!)
  }
  const byId = (a: ScopeNode, b: ScopeNode) => a.id - b.id
  const sort = (node: ScopeNode) => {
    node.children.sort(byId)
    node.children.forEach(sort)
  }
  sort(rootNode)
  return rootNode
}

/** every service slot with a value: the global ones and those of isolated subtrees */
export function serviceSlots(ctx: Context): ServiceSlot[] {
  const root = ctx.root as any
  const internal = root[Context.internal] as Record<string, { type: string }>
  const isolate = root[Context.isolate] as Record<string, symbol>
  const store = root[Context.store] as Record<symbol, { value?: unknown; source: Context | null } | undefined>
  const slots: ServiceSlot[] = []
  for (const key of Object.getOwnPropertySymbols(store)) {
    const item = store[key]
    const name = key.description ?? ''
    if (!item || item.value == null || internal[name]?.type !== 'service') continue
    const slot: ServiceSlot = { name, provider: item.source ? pluginName(item.source) : 'builtin', isolated: isolate[name] !== key }
    if (item.source) slot.context = item.source
    slots.push(slot)
  }
  return slots.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : Number(a.isolated) - Number(b.isolated)))
}

/** every registered listener, per event, in dispatch order, with its owner as core reads it */
export function listeners(ctx: Context): ListenerEntry[] {
  const hooks = (ctx.root.lifecycle as unknown as { _hooks: Record<string | symbol, (Listener & { prepend?: boolean; global?: boolean })[]> })._hooks
  const entries: ListenerEntry[] = []
  for (const event of Reflect.ownKeys(hooks)) {
    if (typeof event !== 'string') continue
    for (const hook of hooks[event] ?? []) {
      const { agent, plugin } = ownerOf(hook)
      const entry: ListenerEntry = { event, listener: hook, plugin, prepend: !!hook.prepend, global: !!hook.global }
      if (agent) entry.agent = agent
      entries.push(entry)
    }
  }
  return entries
}

/** calls back whenever a plugin load is disposed; returns a disposer tied to the caller's plugin */
export function onDisposed(ctx: Context, callback: (scope: DisposedScope) => void): () => boolean {
  return ctx.on('internal/fork', (fork: unknown) => {
    const scope = fork as AnyScope
    // cordis emits internal/fork on creation and on disposal; a disposed fork has lost its uid
    if (scope.uid === null) callback({ name: runtimeName(scope.runtime), context: scope.parent })
  })
}
