// cordis 3.18 logs a plugin whose apply or config fails instead of throwing; deployments want it to stop them.

import type { Context } from 'cordis'
import { failedLoad } from './cordis.ts'
import { messageOf } from './message.ts'

export class PluginStartError extends Error {
  constructor(
    readonly plugin: string,
    readonly cause: unknown,
    /** the plugin itself (the object, function or class given to ctx.plugin) */
    readonly target?: unknown,
  ) {
    super(`plugin "${plugin}" failed to start: ${messageOf(cause)}`)
    this.name = 'PluginStartError'
  }
}

/**
 * the first plugin load that did not start, after every pending load has settled: one whose config or apply failed,
 * or one still waiting for a service no plugin provides (a policy that never runs is a policy not in force)
 */
export async function pluginFailure(ctx: Context): Promise<PluginStartError | undefined> {
  await ctx.lifecycle.flush()
  const failed = failedLoad(ctx)
  if (!failed) return
  if (failed.missing === undefined) return new PluginStartError(failed.name, failed.error, failed.plugin)
  const { missing } = failed
  const services = missing.map((service) => `"${service}"`).join(', ')
  const cause = `it needs the service${missing.length > 1 ? 's' : ''} ${services}, which no loaded plugin provides; load the plugin that provides it`
  return new PluginStartError(failed.name, cause, failed.plugin)
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
