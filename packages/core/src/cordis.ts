// the one module in core that reads cordis 3.18's internals: the service tracker, the hook table, a listener's
// scope and plugin, the registry of plugin loads and the proxies' originals. cordis 4 renames several of these,
// so an upgrade touches this file (and @faber/plugin-tool-cordis' own adapter) and nothing else; a test keeps it so.

import { types } from 'node:util'
import { Context, getTraceable, type Hook, isObject, ReflectService, Service, symbols, withProps } from 'cordis'
import { type Agent, agentOf } from './agent.ts'

/** a listener as cordis keeps it: the context that registered it and its callback */
export interface Listener {
  readonly ctx: Context
  readonly callback: (...args: any[]) => any
}

type HookTable = Record<string, Listener[] | undefined>

/** the root lifecycle's listeners by event, live: cordis adds and removes entries in place */
export function hookTable(ctx: Context): HookTable {
  return (ctx.root.lifecycle as unknown as { _hooks: HookTable })._hooks
}

/** the name of the plugin a context belongs to (`root` for the root context itself) */
export function pluginName(ctx: Context): string {
  const scope = (ctx as { scope?: { runtime?: { name?: string; plugin?: { name?: string } } } }).scope
  const runtime = scope?.runtime
  return runtime?.name || runtime?.plugin?.name || (scope === ctx.root.scope ? 'root' : 'anonymous')
}

/** whether a listener registered on `owner`'s context (undefined: globally) hears an event about `agent` */
function applies(owner: Agent | undefined, agent: Agent | undefined): boolean {
  return owner === undefined || agent?.isWithin(owner) === true
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

const NONE: readonly Listener[] = Object.freeze([])

// Koishi's session-filter pattern: cordis asks `thisArg[Context.filter](listenerCtx)` for each listener of a dispatch
class AgentScope {
  constructor(readonly agent: Agent | undefined) {}

  [Context.filter](ctx: Context) {
    return applies(agentOf(ctx), this.agent)
  }
}

const GLOBAL = new AgentScope(undefined)
const scopes = new WeakMap<Agent, AgentScope>()

/** the `thisArg` that scopes a cordis dispatch (`ctx.emit(scopeOf(agent), event, ...)`) to the listeners of an agent's chain */
export function scopeOf(agent: Agent | undefined): AgentScope {
  if (!agent) return GLOBAL
  let scope = scopes.get(agent)
  if (!scope) scopes.set(agent, (scope = new AgentScope(agent)))
  return scope
}

type Lifecycle = Context['lifecycle']

/** the listeners on one event, per agent (see ListenerIndex): a caller that asks on every call holds this */
export class EventListeners {
  /** @internal */ global: readonly Listener[] | undefined
  /** @internal */ agents: WeakMap<Agent, readonly Listener[]> | undefined

  constructor(
    private index: ListenerIndex,
    readonly event: string,
  ) {}

  for(agent: Agent | undefined): readonly Listener[] {
    if (!agent) return (this.global ??= this.index.build(this.event, undefined))
    const agents = (this.agents ??= new WeakMap())
    let list = agents.get(agent)
    if (!list) agents.set(agent, (list = this.index.build(this.event, agent)))
    return list
  }
}

/**
 * which listeners hear an agent's events, kept per event and agent until the hook table changes. cordis 3.18 adds
 * and removes every listener through its lifecycle's `register` and `unregister` (a plugin's load, dispose and
 * reload, `ctx.on`, a disposer called inside a dispatch, `once`) and `addListener` writes the table itself: each
 * calls `changed()`, which drops every kept list, to be built again when next read. a list is frozen, and a change
 * makes a new one, so a dispatch in progress keeps walking the listeners it started with, as cordis' own does.
 * (`ready` is the exception: cordis empties its list at start without `unregister`; nothing asks this index for it.)
 */
export class ListenerIndex {
  // one EventListeners per event asked about, kept: the pipeline holds its stages' and reads them with no lookup
  private events = new Map<string, EventListeners>()

  constructor(
    private lifecycle: Lifecycle,
    private table: HookTable,
  ) {
    const { register, unregister } = lifecycle
    const index = this
    lifecycle.register = function (this: Lifecycle, ...args) {
      index.changed()
      return register.apply(this, args)
    }
    lifecycle.unregister = function (this: Lifecycle, ...args) {
      index.changed()
      return unregister.apply(this, args)
    }
  }

  /** the hook table changed (or is about to, synchronously): no kept list may be handed out again */
  changed() {
    for (const lists of this.events.values()) {
      lists.global = undefined
      lists.agents = undefined
    }
  }

  /** the listeners of `event`, kept for every later ask */
  event(event: string): EventListeners {
    let lists = this.events.get(event)
    if (!lists) this.events.set(event, (lists = new EventListeners(this, event)))
    return lists
  }

  for(event: string, agent: Agent | undefined): readonly Listener[] {
    return this.event(event).for(agent)
  }

  /** @internal */
  build(event: string, agent: Agent | undefined): readonly Listener[] {
    const hooks = this.table[event]
    if (!hooks?.length) return NONE
    return Object.freeze(this.lifecycle.filterHooks(hooks as Hook[], scopeOf(agent)) as Listener[])
  }
}

const indexes = new WeakMap<Context, ListenerIndex>()

/** the listener index of `ctx`'s deployment (its root context), made on first use */
export function listenerIndex(ctx: Context): ListenerIndex {
  const root = ctx.root
  let index = indexes.get(root)
  if (!index) {
    const lifecycle = untraced(root.lifecycle) as Lifecycle
    indexes.set(root, (index = new ListenerIndex(lifecycle, hookTable(root))))
  }
  return index
}

/**
 * the listeners on `event` that hear `agent` (global ones and those of its chain), in order, as cordis' filter
 * mechanism selects them (`Context.filter`, which honours `{ global: true }`). built once per event and agent and
 * kept until a listener is added or removed anywhere in the deployment. callers that need each listener's answer, or
 * must isolate one that throws, loop over these rather than `ctx.emit(scopeOf(agent), ...)`, which discards answers
 * and stops at the first throw.
 */
export function listenersFor(ctx: Context, event: string, agent: Agent | undefined): readonly Listener[] {
  return listenerIndex(ctx).for(event, agent)
}

/** whether `value` is an object or function with a callable `then` (a listener's or participant's answer may be) */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof value === 'object' && value !== null && typeof (value as PromiseLike<unknown>).then === 'function'
}

/**
 * calls each of `hooks` with `payload`, each isolated from the others, as an observer is: one that throws, or whose
 * promise rejects, goes to `failed` (a rejection is never left for the host to find unhandled), and the rest still hear
 */
export function callEach(hooks: readonly Listener[], payload: unknown, failed: (hook: Listener, error: unknown) => void) {
  for (const hook of hooks) {
    try {
      const returned: unknown = hook.callback(payload)
      if (isThenable(returned)) returned.then(undefined, (error) => failed(hook, error))
    } catch (error) {
      failed(hook, error)
    }
  }
}

/**
 * `ctx.on(event, callback)` without the argument tracing cordis wraps around every listener (about 4.5 µs per call):
 * for events whose arguments are plain frozen data. scoped to `ctx`'s agent and disposed with its plugin, like ctx.on.
 */
export function addListener(ctx: Context, event: string, callback: (...args: any[]) => any, options: { prepend?: boolean } = {}): () => void {
  // a function handed to a method through cordis' service proxy arrives wrapped in a tracing proxy of its own
  const hook = { ctx, callback: untraced(callback), ...options } as unknown as Listener
  const table = hookTable(ctx)
  const listeners = listenerIndex(ctx)
  return ctx.effect(() => {
    const list = (table[event] ??= [])
    if (options.prepend) list.unshift(hook)
    else list.push(hook)
    listeners.changed()
    return () => {
      const index = list.indexOf(hook)
      if (index >= 0) list.splice(index, 1)
      listeners.changed()
    }
  })
}

/**
 * makes a service read the calling plugin's context under `property` rather than as `ctx`: cordis' tracker would
 * otherwise build a shadow context on every access of `this.ctx` inside the service's methods
 */
export function traceCallerAs(service: Service, property: string) {
  ;(service as unknown as Record<symbol, { property: string }>)[Service.tracker].property = property
}

// cordis 3.18 answers every read of a context's property in one proxy handler (ReflectService.handler.get) shared by
// every context. Faber answers it instead, once for the process, with what cordis' answers, minus work whose result
// is never seen (a warm context setup did about 930 such reads, 630 of them building a shadow context nobody read, and
// 74 capturing a stack for a warning never emitted: without them a setup of two idle services took a quarter of the
// time). the answers kept exactly:
// - a property on the context's prototype chain: the value, traced when it carries a tracker (the lifecycle, registry
//   and reflect services are such properties of the root context), see `traced`;
// - an accessor cordis or a plugin declared (`emit`, `on`, `plugin`, `runtime`...), and a builtin service (`logger`,
//   `timer`): the accessor's answer, the service. cordis built an Error for the inject warning first and dropped it;
// - any other name: the inject warning unless declared (cordis' checkInject, unchanged, with an Error built in this
//   frame, which checkInject drops from its stack, so the stack starts at the read), then the service or the property.
// a name given to serviceView is answered by its view before all of these.
const viewReads = new Map<string, (this: Record<symbol, any>) => unknown>()
const handler = ReflectService.handler as Required<Pick<ProxyHandler<Context>, 'get'>>
handler.get = function get(target, prop, ctx: Context & Record<symbol, unknown>) {
  if (typeof prop !== 'string') return Reflect.get(target, prop, ctx)
  const view = viewReads.get(prop)
  if (view) return view.call(ctx)
  if (Reflect.has(target, prop)) return traced(ctx, Reflect.get(target, prop, ctx))
  const [name, internal] = ReflectService.resolveInject(target, prop)
  if (internal?.type === 'accessor') return internal.get.call(ctx, ctx[symbols.receiver])
  if (internal?.builtin) return ctx.reflect.get(name)
  const error = new Error(`property ${name} is not registered, declare it as \`inject\` to suppress this warning`)
  ReflectService.checkInject(ctx, name, error)
  return internal ? ctx.reflect.get(name) : Reflect.get(target, name, ctx)
}

interface Tracker {
  associate?: string
  property?: string
}

/**
 * what cordis' `getTraceable(ctx, value, true)` answers: `value` itself unless it carries a tracker, else a proxy that
 * hands `ctx` out as the tracker's property, so what the value's methods register belongs to the reading context's
 * plugin. a shadow context (cordis' `this.ctx` inside a traced method) stands for the context under it
 */
function traced(ctx: Context & Record<symbol, unknown>, value: unknown): unknown {
  if (!isObject(value)) return value
  if (Object.hasOwn(value, symbols.shadow)) return Object.getPrototypeOf(value)
  const tracker = (value as Record<symbol, Tracker | undefined>)[symbols.tracker]
  if (!tracker) return value
  const trace = new Trace(ctx[symbols.shadow] ? Object.getPrototypeOf(ctx) : ctx, tracker)
  return (trace.proxy = new Proxy(value, trace))
}

/**
 * cordis' tracing proxy for a value read as a context's property, with the same traps (get, set, apply) and answers.
 * cordis' get trap builds, for every read, a shadow context (`ctx.extend(...)` and a proxy over the receiver) to pass
 * to `Reflect.get` as the receiver. a receiver is seen only by a getter, or by a proxy, on the way to the property:
 * for a data property (a method, a field) or none, the read's answer is the same whatever the receiver, so the shadow
 * is built only when the property is found at an accessor or the walk meets a proxy (whose traps are not walked).
 * the only other thing the skipped shadow did was call the context's `extend`, which makes objects and nothing else
 */
class Trace implements ProxyHandler<object> {
  proxy!: object

  constructor(
    private ctx: Context & Record<symbol, any>,
    private tracker: Tracker,
  ) {}

  get(target: object, prop: string | symbol, receiver: unknown) {
    const { ctx, tracker } = this
    if (prop === symbols.original) return target
    if (prop === tracker.property) return ctx
    if (typeof prop === 'symbol') return Reflect.get(target, prop, receiver)
    const associated = tracker.associate && `${tracker.associate}.${prop}`
    if (associated && ctx[symbols.internal][associated]) return Reflect.get(ctx, associated, withProp(ctx, symbols.receiver, receiver))
    const seen = seesReceiver(target, prop) ? shadow(ctx, target, tracker.property, receiver) : receiver
    const value = Reflect.get(target, prop, seen)
    // a traced value inside: cordis' own getTraceable traces it, its methods wrapped (not `noTrap`): the proxy cordis
    // builds here, for any value that is not itself a shadow context (no context carries a tracker)
    return (value as Record<symbol, unknown> | undefined)?.[symbols.tracker] ? getTraceable(ctx, value) : value
  }

  set(target: object, prop: string | symbol, value: unknown, receiver: unknown) {
    const { ctx, tracker } = this
    if (prop === symbols.original || prop === tracker.property) return false
    if (typeof prop === 'symbol') return Reflect.set(target, prop, value, receiver)
    const associated = tracker.associate && `${tracker.associate}.${prop}`
    if (associated && ctx[symbols.internal][associated]) return Reflect.set(ctx, associated, value, withProp(ctx, symbols.receiver, receiver))
    // a setter, and an ordinary set that defines the property on its receiver, both see it: always the shadow
    return Reflect.set(target, prop, value, shadow(ctx, target, tracker.property, receiver))
  }

  apply(target: object, thisArg: unknown, args: unknown[]) {
    const invoke = (target as Record<symbol, ((...args: unknown[]) => unknown) | undefined>)[symbols.invoke]
    if (!invoke) return Reflect.apply(target as (...args: unknown[]) => unknown, thisArg, args)
    return invoke.apply(this.proxy, args)
  }
}

/** whether `Reflect.get(target, prop, receiver)` can depend on its receiver: an accessor or a proxy on the way */
function seesReceiver(target: object, prop: string): boolean {
  for (let object: object | null = target; object; object = Object.getPrototypeOf(object)) {
    if (types.isProxy(object)) return true
    const descriptor = Object.getOwnPropertyDescriptor(object, prop)
    if (descriptor) return !('value' in descriptor)
  }
  return false
}

/** `receiver`, its tracker's property answered by a shadow of `ctx` that records the value's own context (cordis' createShadow) */
function shadow(ctx: Context, target: object, property: string | undefined, receiver: unknown): unknown {
  if (!property) return receiver
  const origin = Reflect.getOwnPropertyDescriptor(target, property)?.value
  if (!origin) return receiver
  return withProp(receiver, property, ctx.extend({ [symbols.shadow]: origin }))
}

/** `target` with one read-only property answered in front of it (cordis' withProp) */
function withProp(target: unknown, property: string | symbol, value: unknown): unknown {
  return withProps(target, Object.defineProperty(Object.create(null), property, { value, writable: false }))
}

/**
 * makes `ctx.<name>` cheap without losing who reads it. cordis 3.18 answers every read of a service property with a
 * new tracing proxy (and a captured stack for its inject warning): about 13 µs, on a path users write inline. the
 * context handler above answers the name with a view built once per reading context: an object over the service
 * whose `property` is that context, so whatever is registered through it still belongs to the plugin that registered
 * it. the service's methods must write their state on the service itself, not on `this`.
 *
 * each reading context keeps, from its first read, where its service is looked up — its isolate map and the root's
 * store, objects cordis makes once per context and only changes inside — and the view it got last: a later read is
 * one WeakMap lookup and two plain property reads, not three reads through the context's proxy. the service is still
 * looked up on every read, so a service set anew is seen at once
 */
export function serviceView(name: string, property: string) {
  const views = new WeakMap<object, { service: object; view: object }>()
  interface Reader {
    isolate: Record<string, symbol | undefined>
    store: Record<symbol, { value?: object } | undefined>
    caller: object
    service?: object
    view?: object
  }
  const readers = new WeakMap<object, Reader>()
  function read(this: Record<symbol, any>) {
    let reader = readers.get(this)
    if (!reader) {
      // a context cordis made to trace a service's own `this.ctx` stands for the context that called the service
      const caller = this[symbols.shadow] ? Object.getPrototypeOf(this) : this
      reader = { isolate: this[symbols.isolate], store: this[symbols.store], caller }
      readers.set(this, reader)
    }
    const key = reader.isolate[name]
    const service = key && reader.store[key]?.value
    if (!service) return service
    if (reader.service !== service) {
      let entry = views.get(reader.caller)
      if (entry?.service !== service) {
        // no tracker on the view: cordis hands it out as it is instead of wrapping it in a proxy of its own
        const view = Object.create(service, { [property]: { value: reader.caller }, [symbols.tracker]: { value: undefined } })
        views.set(reader.caller, (entry = { service, view }))
      }
      reader.service = service
      reader.view = entry.view
    }
    return reader.view
  }
  Object.defineProperty(Context.prototype, name, { configurable: true, get: read })
  // the getter above is what the handler would find on the prototype chain, and it would hand the view (no tracker)
  // back as it is: answering the name first spares the chain walk (about 0.4 µs a read)
  viewReads.set(name, read)
}

/**
 * the service object behind cordis' tracing proxy. calls on it skip the proxy (about 1 µs each), but also the
 * caller's identity: use it for hot read and execute paths, never to register things, which must stay tied to the
 * plugin that registers them.
 */
export function untraced<T>(service: T): T {
  return ((service as Record<symbol, unknown> | undefined)?.[symbols.original] as T | undefined) ?? service
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
