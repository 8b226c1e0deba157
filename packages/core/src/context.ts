// two things cordis 3.18 does that deployments want undone: it logs a plugin whose apply or config fails instead of
// throwing, and it hands every `ctx.<service>` reader a tracing proxy that costs about 1 µs per method call.

import { type Context, symbols } from 'cordis'

export class PluginStartError extends Error {
  constructor(
    readonly plugin: string,
    readonly cause: unknown,
    /** the plugin itself (the object, function or class given to ctx.plugin) */
    readonly target?: unknown,
  ) {
    super(`plugin "${plugin}" failed to start: ${cause instanceof Error ? cause.message : String(cause)}`)
    this.name = 'PluginStartError'
  }
}

// cordis 3.18's ScopeStatus.PENDING: a load whose required services are not all there yet
const PENDING = 0

/** the required services a pending load still waits for (none when it is not pending) */
export function waitingFor(fork: { ctx: Context; status: number; runtime: { inject?: unknown; isReusable?: boolean; status: number } }): string[] {
  const scope = fork.runtime.isReusable ? fork : fork.runtime
  if (scope.status !== PENDING) return []
  return Object.entries((fork.runtime.inject ?? {}) as Record<string, { required?: boolean }>)
    .filter(([name, meta]) => meta.required && fork.ctx.get(name) == null)
    .map(([name]) => name)
}

/**
 * the first plugin load that did not start, after every pending load has settled: one whose config or apply failed,
 * or one still waiting for a service no plugin provides (a policy that never runs is a policy not in force)
 */
export async function pluginFailure(ctx: Context): Promise<PluginStartError | undefined> {
  await ctx.lifecycle.flush()
  for (const runtime of ctx.registry.values()) {
    const name = runtime.name ?? (runtime.plugin as { name?: string })?.name ?? 'anonymous'
    const failed = runtime.error ? runtime : [...runtime.children].find((fork) => fork.error)
    if (failed?.error) return new PluginStartError(name, failed.error, runtime.plugin)
    for (const fork of runtime.children) {
      const missing = waitingFor(fork as never)
      if (!missing.length) continue
      const services = missing.map((service) => `"${service}"`).join(', ')
      const cause = `it needs the service${missing.length > 1 ? 's' : ''} ${services}, which no loaded plugin provides; load the plugin that provides it`
      return new PluginStartError(name, cause, runtime.plugin)
    }
  }
}

/** waits for pending plugin loads and throws a PluginStartError naming the first plugin that failed */
export async function assertStarted(ctx: Context): Promise<void> {
  const failure = await pluginFailure(ctx)
  if (failure) throw failure
}

/**
 * starts a deployment the way it should be started: waits for every pending plugin load and, when any plugin failed
 * to start, stops the context and throws a PluginStartError naming it, so a deployment missing a policy never runs
 */
export async function startDeployment(ctx: Context): Promise<void> {
  await ctx.start()
  const failure = await pluginFailure(ctx)
  if (!failure) return
  await ctx.stop()
  throw failure
}

/**
 * the service object behind cordis' tracing proxy. calls on it skip the proxy (about 1 µs each), but also the
 * caller's identity: use it for hot read and execute paths (`execute`, `wire`, ...), never to register things,
 * which must stay tied to the plugin that registers them.
 */
export function untraced<T>(service: T): T {
  return ((service as Record<symbol, unknown> | undefined)?.[symbols.original] as T | undefined) ?? service
}
