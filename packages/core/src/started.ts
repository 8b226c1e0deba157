// cordis logs a plugin whose apply or config fails instead of throwing it; deployments and tests want it surfaced

import type { Context } from 'cordis'

export class PluginStartError extends Error {
  constructor(
    readonly plugin: string,
    readonly cause: unknown,
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
    if (failed?.error) return new PluginStartError(runtime.name ?? (runtime.plugin as { name?: string })?.name ?? 'anonymous', failed.error)
  }
}

/** waits for pending plugin loads and throws a PluginStartError naming the first plugin that failed */
export async function assertStarted(ctx: Context): Promise<void> {
  const failure = await pluginFailure(ctx)
  if (failure) throw failure
}
