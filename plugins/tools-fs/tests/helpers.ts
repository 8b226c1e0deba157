// test helpers: a started deployment over a fresh temp directory, plugin errors surfaced, one-line calls

import path from 'node:path'
import type { Agent, ToolResult } from '@faber/core'
import { call, deployment, scratch } from '@faber/core/testing'
import { Logger } from 'cordis'
import * as ToolsFs from '../src/index.ts'

Logger.levels.base = 0

// this file's deployments and temp dirs: cleanup is a root hook, so it must not stop other suites' (as disposeAll would)
const kit = scratch('faber-fs-')
export const { tempDir, cleanup } = kit

/** a started deployment with tools-fs over a fresh temp directory */
export async function workspace(config: Partial<ToolsFs.ConfigInput> = {}) {
  const root = await tempDir()
  const ctx = await deployment({ mode: 'native' }, (ctx) => {
    kit.track(ctx)
    ctx.plugin(ToolsFs, { root, ...config })
  })
  return { ctx, root, call: (name: string, args: unknown, agent?: Agent) => call(ctx, name, args, { agent }), file: (rel: string) => path.join(root, rel) }
}

/** the tool's own error code of a failed call */
export function toolCode(result: ToolResult) {
  if (!result.isError) throw new Error(`expected a failure, got ${result.content}`)
  return result.error.toolCode ?? result.error.code
}
