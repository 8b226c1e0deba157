// the one module in core that reads cordis 3.18's internals: the hook table, a listener's scope and plugin, a service's
// tracker and the registry of plugin loads. it reads them and never writes them: cordis' shared handlers, its lifecycle
// and its hook tables stay as cordis made them. cordis 4 renames several of these, so an upgrade touches this file (and
// @faber/plugin-tool-cordis' own adapter) and nothing else; a test keeps it so.

import { Context, Service } from 'cordis'
import { type Agent, agentOf } from './agent.ts'

/** a listener as cordis keeps it: the context that registered it and its callback */
export interface Listener {
  readonly ctx: Context
  readonly callback: (...args: any[]) => any
}

type HookTable = Record<string, Listener[] | undefined>

/** the name of the plugin a context belongs to (`root` for the root context itself) */
export function pluginName(ctx: Context): string {
  const scope = (ctx as { scope?: { runtime?: { name?: string; plugin?: { name?: string } } } }).scope
  const runtime = scope?.runtime
  return runtime?.name || runtime?.plugin?.name || (scope === ctx.root.scope ? 'root' : 'anonymous')
}

// reading a listener's context goes through cordis' proxies; its agent and plugin never change, so read them once
const owners = new WeakMap<Listener, { agent?: Agent; plugin: string }>()

/** the agent (undefined: global) and the plugin a listener belongs to */
export function ownerOf(listener: Listener): { agent?: Agent; plugin: string } {
  let owner = owners.get(listener)
  if (!owner) {
    owner = { agent: agentOf(listener.ctx), plugin: pluginName(listener.ctx) }
    owners.set(listener, owner)
  }
  return owner
}

/** every listener of the deployment, whichever agent it belongs to (cordis' own emit without a scope) */
export const EVERY_AGENT: unique symbol = Symbol('faber.everyAgent')

/** whom a dispatch reaches: an agent's chain and the global listeners, the global listeners alone (undefined), or all */
export type Audience = Agent | undefined | typeof EVERY_AGENT

// Koishi's session-filter pattern: cordis asks `thisArg[Context.filter](listenerCtx)` for each listener of a dispatch
// (a listener registered with { global: true } hears every dispatch without being asked)
class AgentScope {
  constructor(readonly agent: Agent | undefined) {}

  [Context.filter](ctx: Context) {
    const owner = agentOf(ctx)
    return owner === undefined || this.agent?.isWithin(owner) === true
  }
}

const GLOBAL = new AgentScope(undefined)
const scopes = new WeakMap<Agent, AgentScope>()
// no filter: cordis' filterHooks lets every listener through
const EVERYONE = Object.freeze({})

/** the `thisArg` that scopes a cordis dispatch (`ctx.emit(scopeOf(agent), event, ...)`) to the listeners of an agent's chain */
export function scopeOf(agent: Agent | undefined): AgentScope {
  if (!agent) return GLOBAL
  let scope = scopes.get(agent)
  if (!scope) scopes.set(agent, (scope = new AgentScope(agent)))
  return scope
}

/** what cordis' lifecycle gives a reader: its listeners by event (live: cordis adds and removes in place) and its filter */
interface Hooks {
  _hooks: HookTable
  filterHooks(hooks: Listener[], thisArg?: object): Listener[]
}

// the one read of cordis' hook table. cordis 3.18 lists an event's listeners nowhere public: its emit, parallel, serial
// and bail call them in a dispatch that the first throw (or, in serial, rejection) ends for all the rest, and that tells
// no caller which listener, of which plugin, answered, so neither isolation nor a plugin's deadline could be kept on
// it. what it selects is pinned to what cordis' own emit calls, in order, by core's listeners spec
function hooksOn(lifecycle: Hooks, event: string): Listener[] | undefined {
  return lifecycle._hooks[event]
}

function select(lifecycle: Hooks, hooks: Listener[] | undefined, audience: Audience): readonly Listener[] {
  if (!hooks?.length) return NONE
  return Object.freeze(lifecycle.filterHooks(hooks, audience === EVERY_AGENT ? EVERYONE : scopeOf(audience)))
}

const NONE: readonly Listener[] = Object.freeze([])

/**
 * the listeners on `event` that `audience` reaches (by default an agent's chain and the global ones), in order, as
 * cordis' filter mechanism selects them (`Context.filter`, which honours `{ global: true }`): what `dispatch`,
 * `emitEach` and `firstAnswer` call. a frozen copy: listeners added or removed while it is walked do not change it.
 */
export function listenersFor(ctx: Context, event: string, audience: Audience): readonly Listener[] {
  const lifecycle = ctx.root.lifecycle as unknown as Hooks
  return select(lifecycle, hooksOn(lifecycle, event), audience)
}

interface Kept {
  list: readonly Listener[]
  /** the event's list in cordis' table when `list` was selected (undefined: none yet), and its length then */
  source: Listener[] | undefined
  length: number
  version: number
}

/** the listeners on one event, per audience (see ListenerIndex): a caller that asks on every call holds this */
export class EventListeners {
  private global: Kept | undefined
  private every: Kept | undefined
  private agents: WeakMap<Agent, Kept> | undefined

  constructor(
    private index: ListenerIndex,
    readonly event: string,
  ) {}

  for(audience: Audience): readonly Listener[] {
    const index = this.index
    let kept = audience === undefined ? this.global : audience === EVERY_AGENT ? this.every : this.agents?.get(audience)
    if (kept && kept.version === index.version && kept.length === (kept.source?.length ?? 0)) return kept.list
    const source = hooksOn(index.lifecycle, this.event)
    kept = { list: select(index.lifecycle, source, audience), source, length: source?.length ?? 0, version: index.version }
    if (audience === undefined) this.global = kept
    else if (audience === EVERY_AGENT) this.every = kept
    else (this.agents ??= new WeakMap()).set(audience, kept)
    return kept.list
  }
}

/**
 * which listeners hear an agent's events, kept per event and audience while no listener was added or removed, for
 * the pipeline, which asks at every stage of every call. cordis tells of every listener added (`internal/listener`,
 * which `ctx.on` dispatches before it adds one): that moves the version on. a listener is removed from its event's list
 * in place (dispose, reload, `once`), which leaves the list shorter than when it was kept. either way the kept list is
 * selected again on the next ask; a list is frozen, so a dispatch in progress walks the listeners it started with, as
 * cordis' own does.
 */
export class ListenerIndex {
  /** @internal */ version = 0
  /** @internal */ readonly lifecycle: Hooks
  private events = new Map<string, EventListeners>()

  /** `ctx`: the context of the service that keeps the index; it listens for as long as that service lives */
  constructor(ctx: Context) {
    this.lifecycle = ctx.root.lifecycle as unknown as Hooks
    ctx.on('internal/listener', () => void this.version++, { global: true })
  }

  /** the listeners of `event`, kept for every later ask */
  event(event: string): EventListeners {
    let lists = this.events.get(event)
    if (!lists) this.events.set(event, (lists = new EventListeners(this, event)))
    return lists
  }
}

/** whether `value` is an object or function with a callable `then` (a listener's or participant's answer may be) */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof value === 'object' && value !== null && typeof (value as PromiseLike<unknown>).then === 'function'
}

/**
 * makes a service read the calling plugin's context under `property` rather than as `ctx`: cordis' tracker would
 * otherwise build a shadow context on every access of `this.ctx` inside the service's methods. the service's own
 * tracker, which cordis reads for that service alone
 */
export function traceCallerAs(service: Service, property: string) {
  ;(service as unknown as Record<symbol, { property: string }>)[Service.tracker].property = property
}

// cordis 3.18's ScopeStatus.PENDING: a load whose required services are not all there yet
const PENDING = 0

type Fork = { ctx: Context; status: number; error?: unknown; runtime: { inject?: unknown; isReusable?: boolean; status: number } }

/** the required services a pending load still waits for (none when it is not pending) */
export function waitingFor(fork: Fork): string[] {
  const scope = fork.runtime.isReusable ? fork : fork.runtime
  if (scope.status !== PENDING) return []
  return Object.entries((fork.runtime.inject ?? {}) as Record<string, { required?: boolean }>)
    .filter(([name, meta]) => meta.required && fork.ctx.get(name) == null)
    .map(([name]) => name)
}

/** a plugin load that did not start: its config or apply threw (`error`), or it waits for services (`missing`) */
export interface FailedLoad {
  name: string
  plugin: unknown
  error?: unknown
  missing?: string[]
}

/** the names of the plugins loaded in the deployment, as cordis' registry records them */
export function loadedPlugins(ctx: Context): string[] {
  const names: string[] = []
  for (const runtime of ctx.root.registry.values()) if (runtime.name) names.push(runtime.name)
  return names
}

/** the first plugin load that did not start, as cordis' registry records it (call after the loads have settled) */
export function failedLoad(ctx: Context): FailedLoad | undefined {
  for (const runtime of ctx.registry.values()) {
    const name = runtime.name ?? (runtime.plugin as { name?: string })?.name ?? 'anonymous'
    const failed = runtime.error ? runtime : [...runtime.children].find((fork) => fork.error)
    if (failed?.error) return { name, plugin: runtime.plugin, error: failed.error }
    for (const fork of runtime.children) {
      const missing = waitingFor(fork as unknown as Fork)
      if (missing.length) return { name, plugin: runtime.plugin, missing }
    }
  }
}
