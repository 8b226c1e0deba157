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

/** the first plugin (or fork) that failed to start, after every pending load has settled */
export async function pluginFailure(ctx: Context): Promise<PluginStartError | undefined> {
  await ctx.lifecycle.flush()
  for (const runtime of ctx.registry.values()) {
    const failed = runtime.error ? runtime : [...runtime.children].find((fork) => fork.error)
    if (failed?.error) return new PluginStartError(runtime.name ?? (runtime.plugin as { name?: string })?.name ?? 'anonymous', failed.error, runtime.plugin)
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
