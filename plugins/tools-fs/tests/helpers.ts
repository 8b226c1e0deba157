// test helpers: a started deployment over a fresh temp directory, plugin errors surfaced, one-line calls

import { mkdtemp, realpath, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import ToolRuntime, { type Agent, assertStarted, type ToolResult } from '@faber/core'
import { Context, Logger } from 'cordis'
import * as ToolsFs from '../src/index.ts'

Logger.levels.base = 0

const dirs: string[] = []

export async function tempDir(prefix = 'faber-fs-') {
  const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), prefix)))
  dirs.push(dir)
  return dir
}

export async function cleanup() {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true })
}

let calls = 0

export function caller(ctx: Context) {
  return (name: string, args: unknown, agent?: Agent): Promise<ToolResult> =>
    ctx.tools.execute({ callId: `c${++calls}`, name, arguments: args, signal: new AbortController().signal, agent })
}

export async function workspace(config: Partial<ToolsFs.ConfigInput> = {}) {
  const root = await tempDir()
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  ctx.plugin(ToolsFs, { root, ...config })
  await ctx.start()
  await assertStarted(ctx)
  return { ctx, root, call: caller(ctx), file: (rel: string) => path.join(root, rel) }
}

export function value<T = any>(result: ToolResult): T {
  if (result.isError) throw new Error(`expected a success, got ${result.error.code}: ${result.error.message}`)
  return result.value as T
}

/** the tool's own error code of a failed call */
export function toolCode(result: ToolResult) {
  if (!result.isError) throw new Error(`expected a failure, got ${result.content}`)
  return result.error.toolCode ?? result.error.code
}
