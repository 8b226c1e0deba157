import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import ToolRuntime, { type Mode } from '@faber/core'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0

export async function deployment(config: { mode?: Mode } = {}) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, config)
  await ctx.start()
  await rethrow(ctx)
  return ctx
}

/** cordis logs a failing plugin instead of throwing: surface it */
export async function rethrow(ctx: Context) {
  await ctx.lifecycle.flush()
  for (const runtime of ctx.registry.values()) {
    if (runtime.error) throw runtime.error
    for (const fork of runtime.children) if (fork.error) throw fork.error
  }
}

export function deferred<T = void>() {
  let resolve!: (value: T) => void
  let reject!: (error: unknown) => void
  const promise = new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

export async function tempDir(prefix = 'faber-agent-') {
  const dir = await mkdtemp(join(tmpdir(), prefix))
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) }
}

/** lets pending promise callbacks run */
export const tick = () => new Promise((resolve) => setImmediate(resolve))
