import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import ToolRuntime, { assertStarted, type Mode } from '@faber/core'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0

export async function deployment(config: { mode?: Mode } = {}) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, config)
  await ctx.start()
  await assertStarted(ctx)
  return ctx
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
