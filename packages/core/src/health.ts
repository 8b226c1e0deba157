// whether every plugin of a deployment is in force. cordis 3.18 only logs a plugin whose config, apply or start
// fails, and leaves one that waits for a service pending without a word; a policy in either state is not in force,
// so no tool may run. this module reads cordis' registry (the plugin loads of the root context and their status) and
// keeps the answer current from the registry's public events — `internal/runtime`, `internal/fork`,
// `internal/status` and `ready` — so the pipeline reads one boolean per call. the only reader of scopes in core.

import type { Context } from 'cordis'
import { formatDuration } from './deadline.ts'
import { messageOf } from './message.ts'

// cordis 3.18's ScopeStatus
const PENDING = 0
const FAILED = 3

/** a plugin load as cordis' registry keeps it: a runtime (MainScope) or one of its forks */
interface Scope {
  uid: number | null
  status: number
  error?: unknown
  ctx: Context
  runtime: Runtime
}

interface Runtime extends Scope {
  name?: string
  plugin: unknown
  inject: Record<string, { required?: boolean } | undefined>
  children: Scope[]
}

/** a plugin load that is not in force */
export interface PluginFault {
  /** the plugin's name, as cordis records it */
  plugin: string
  /**
   * `failed`: its config was refused, or its apply or service start threw (`error`). `waiting`: it still waits for
   * a required service (`missing`) past the start's grace. `starting`: it waits, within the grace; calls wait too
   */
  state: 'failed' | 'waiting' | 'starting'
  /** what is wrong and what to do, in one sentence */
  reason: string
  error?: unknown
  missing?: string[]
  /** declared non-essential: reported, but calls run */
  essential: boolean
  /** when it was first seen in this state (epoch ms) */
  since: number
}

export interface HealthOptions {
  /** plugin names whose faults leave the deployment in force */
  nonEssential: readonly string[]
  /** how long a plugin may wait for a required service once the deployment has started */
  startGraceMs: number
}

function nameOf(runtime: Runtime): string {
  return runtime.name || (runtime.plugin as { name?: string } | undefined)?.name || 'anonymous'
}

/** the required services a pending load still waits for (none when it is not pending) */
function missingOf(scope: Scope): string[] {
  if (scope.status !== PENDING) return []
  const missing: string[] = []
  for (const [name, meta] of Object.entries(scope.runtime.inject)) if (meta?.required && scope.ctx.get(name) == null) missing.push(name)
  return missing
}

/** the plugin loads of a deployment that are not in force, and whether that closes it to calls */
export class DeploymentHealth {
  /** true while every essential plugin load is in force: what the pipeline reads on every call */
  ok = true
  private faults = new Map<Scope, { fault: PluginFault; deadline?: number }>()
  private waiters = new Set<() => void>()
  private timer: ReturnType<typeof setTimeout> | undefined

  constructor(
    private root: Context,
    private options: () => HealthOptions,
  ) {}

  /** listens on `ctx` (the runtime's context, so the listeners leave with it) and reads what is there already */
  watch(ctx: Context) {
    ctx.on('internal/runtime', (runtime) => this.check(runtime as unknown as Scope))
    ctx.on('internal/fork', (fork) => {
      this.check(fork as unknown as Scope)
      this.check((fork as unknown as Scope).runtime)
    })
    ctx.on('internal/status', (scope) => this.check(scope as unknown as Scope))
    // pending loads count once the deployment has started: at start, and at once when the runtime is loaded later
    ctx.on('ready', () => this.scan())
    this.scan()
    // an effect, not a dispose listener: each ctx.on costs a context setup some 50 µs (cordis dispatches internal/listener)
    ctx.effect(() => () => {
      this.faults.clear()
      this.update()
      clearTimeout(this.timer)
    })
  }

  /** every fault: essential ones first, those that closed the deployment before those still starting, oldest first */
  list(): PluginFault[] {
    const rank = (fault: PluginFault) => (fault.essential ? 0 : 2) + (fault.state === 'starting' ? 1 : 0)
    return [...this.faults.values()].map((entry) => entry.fault).sort((a, b) => rank(a) - rank(b) || a.since - b.since)
  }

  /** the fault that keeps calls from running, if any: a failed or waiting load, else one still starting */
  closedBy(): PluginFault | undefined {
    const fault = this.list()[0]
    return fault?.essential ? fault : undefined
  }

  /** resolves when the faults change (a load starts, fails or leaves, a grace runs out) or `signal` aborts */
  changed(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.waiters.delete(done)
        signal.removeEventListener('abort', done)
        resolve()
      }
      this.waiters.add(done)
      signal.addEventListener('abort', done, { once: true })
    })
  }

  /** the message of a call refused while `fault` closes the deployment */
  message(fault: PluginFault): string {
    const others = this.list().filter((f) => f.essential && f.plugin !== fault.plugin)
    const more = others.length ? ` (so ${others.length > 1 ? 'are' : 'is'} ${[...new Set(others.map((f) => `"${f.plugin}"`))].join(', ')})` : ''
    return (
      `no tool can run: plugin "${fault.plugin}" is not in force${more}: ${fault.reason}. ` +
      'Every call ends like this until the deployer fixes the deployment, so do not retry; tell the user'
    )
  }

  private scan() {
    for (const runtime of this.root.registry.values() as Iterable<unknown> as Iterable<Runtime>) {
      this.check(runtime)
      for (const fork of runtime.children) this.check(fork)
    }
  }

  private check(scope: Scope | undefined) {
    if (!scope?.runtime?.plugin) return
    const seen = this.faults.get(scope)
    const fault = this.faultOf(scope, seen?.fault)
    if (fault) this.faults.set(scope, fault)
    else if (!seen) return
    else this.faults.delete(scope)
    this.update()
  }

  private faultOf(scope: Scope, seen: PluginFault | undefined): { fault: PluginFault; deadline?: number } | undefined {
    if (scope.uid === null) return
    const plugin = nameOf(scope.runtime)
    const { nonEssential, startGraceMs } = this.options()
    const essential = !nonEssential.includes(plugin)
    if (scope.status === FAILED) {
      const error = scope.error
      const reason = `it failed to start (${messageOf(error)}); reload it with a valid config, or dispose it`
      return { fault: { plugin, state: 'failed', reason, error, essential, since: seen?.state === 'failed' ? seen.since : Date.now() } }
    }
    // before the deployment starts, services are still to come: a pending load is not a fault yet
    const missing = this.root.lifecycle.isActive ? missingOf(scope) : []
    if (!missing.length) return
    const since = seen && seen.state !== 'failed' ? seen.since : Date.now()
    const deadline = since + startGraceMs
    const services = missing.map((name) => `"${name}"`).join(', ')
    const waited = `it waits for the service${missing.length > 1 ? 's' : ''} ${services}`
    if (Date.now() < deadline) {
      const reason = `${waited}; calls wait for it up to ${formatDuration(startGraceMs)} after it began to wait`
      return { fault: { plugin, state: 'starting', reason, missing, essential, since }, deadline }
    }
    const reason = `${waited}, which no loaded plugin provided within ${formatDuration(startGraceMs)}; load the plugin that provides it, or dispose this one`
    return { fault: { plugin, state: 'waiting', reason, missing, essential, since } }
  }

  private update() {
    let ok = true
    let next = Number.POSITIVE_INFINITY
    for (const { fault, deadline } of this.faults.values()) {
      if (fault.essential) ok = false
      if (deadline !== undefined) next = Math.min(next, deadline)
    }
    this.ok = ok
    clearTimeout(this.timer)
    this.timer = undefined
    if (next !== Number.POSITIVE_INFINITY) {
      // a grace running out changes no scope: check the waiting loads again then
      this.timer = setTimeout(() => this.recheck(), Math.max(0, next - Date.now()))
      this.timer.unref?.()
    }
    for (const wake of [...this.waiters]) wake()
  }

  private recheck() {
    this.timer = undefined
    for (const scope of [...this.faults.keys()]) this.check(scope)
  }
}
