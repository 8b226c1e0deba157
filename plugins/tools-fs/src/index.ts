// @faber/plugin-tools-fs: read / write / edit / list / glob / grep over one workspace root.

import { defineConfig } from '@faber/core'
import { type Context, Schema } from 'cordis'
import { type FsLimits, fsTools } from './tools.ts'
import { Workspace } from './workspace.ts'

export * from './commit.ts'
export * from './errors.ts'
export { compileGlob } from './search.ts'
export { ABSENT, currentVersion, versionOf } from './version.ts'
export { type Resolved, Workspace } from './workspace.ts'

export const name = 'tools-fs'
export const reusable = true
export const inject = ['tools']

export interface Config extends FsLimits {
  root: string
}

/** what a deployer writes: the root, and any limits to change */
export type ConfigInput = { root: string; ignore?: string[] } & Partial<Omit<FsLimits, 'ignore'>>

export const Config = defineConfig<Config, ConfigInput>()(
  Schema.object({
    root: Schema.string().required().description('the workspace directory every path resolves inside'),
    maxFileBytes: Schema.natural()
      .min(1)
      .default(1024 * 1024)
      .description('files larger than this are refused by read and edit and skipped by grep'),
    readLines: Schema.natural().min(1).default(2000).description('lines read returns when no limit is given'),
    maxLineChars: Schema.natural().min(16).default(2000).description('longer lines are cut in read output'),
    maxResults: Schema.natural().min(1).default(1000).description('the most entries list and glob return, and the highest grep limit'),
    grepLimit: Schema.natural().min(1).default(200).description('matching lines grep returns when no limit is given'),
    ignore: Schema.array(Schema.string()).default(['.git', 'node_modules']).description('directory names glob and grep never descend into'),
  }),
)

export function apply(ctx: Context, config: Config) {
  const workspace = new Workspace(config.root)
  const limits = { ...config, grepLimit: Math.min(config.grepLimit, config.maxResults) }
  for (const tool of fsTools(ctx, workspace, limits)) ctx.tools.register(tool)
}

/** starting it reaches no network and writes nothing (faber replay starts it as it is) */
export const replay = 'inert'

/** the plugin as one object, for `ctx.plugin(ToolsFs, config)` with a default import */
export default { name, reusable, inject, Config, apply, replay }
