// test helpers: a started deployment over a fresh temp directory, plugin errors surfaced, one-line calls

import { mkdtemp, realpath, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import type { Agent, ToolResult } from '@faber/core'
import { call, deployment } from '@faber/core/testing'
import { type Context, Logger } from 'cordis'
import * as ToolsFs from '../src/index.ts'

Logger.levels.base = 0

const dirs: string[] = []
// this file's deployments, stopped by cleanup: a root hook, so it must not stop other suites' (as disposeAll would)
const started: Context[] = []

export async function tempDir(prefix = 'faber-fs-') {
  const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), prefix)))
  dirs.push(dir)
  return dir
}

/** stops every deployment and removes every temp dir of the test */
export async function cleanup() {
  for (const ctx of started.splice(0)) await ctx.stop()
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true })
}

/** a started deployment with tools-fs over a fresh temp directory */
export async function workspace(config: Partial<ToolsFs.ConfigInput> = {}) {
  const root = await tempDir()
  const ctx = await deployment({ mode: 'native' }, (ctx) => {
    started.push(ctx)
    ctx.plugin(ToolsFs, { root, ...config })
  })
  return { ctx, root, call: (name: string, args: unknown, agent?: Agent) => call(ctx, name, args, { agent }), file: (rel: string) => path.join(root, rel) }
}

/** the tool's own error code of a failed call */
export function toolCode(result: ToolResult) {
  if (!result.isError) throw new Error(`expected a failure, got ${result.content}`)
  return result.error.toolCode ?? result.error.code
}
