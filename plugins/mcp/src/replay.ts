// the MCP client in a replay (faber replay): no server is started, connected to or asked for its tools. a recorded
// call of a tool under a configured server's prefix is registered when the replay asks for it (`replay/tool`), from
// the name alone: no schema (the recorded arguments are taken as they were sent) and no annotations, since only the
// server could say them

import { type Agent, defineConfig } from '@faber/core'
import { type Context, Schema } from 'cordis'

/** characters a Faber tool name may not hold, replaced in an MCP server's names */
export const FABER_NAME = /[^A-Za-z0-9_.:-]/g

/** what a server's tool names start with: its prefix, or `<name>__` */
export function toolPrefix(server: { name: string; prefix?: string }) {
  return server.prefix ?? `${server.name.replace(FABER_NAME, '_')}__`
}

export const name = 'mcp-replayed'
export const inject = ['tools']
export const reusable = true

export interface Config {
  /** the configured servers' names and prefixes (the MCP client's config as a replay reads it) */
  servers: { name: string; prefix?: string }[]
}

export type ConfigInput = Config

export const Config = defineConfig<Config, ConfigInput>()(
  Schema.object({
    servers: Schema.array(Schema.object({ name: Schema.string().required(), prefix: Schema.string() })).required(),
  }),
)

/** the MCP client's config as the stand-in reads it: each server's name and prefix */
export function replayConfig(config: { servers: { name: string; prefix?: string }[] }): Config {
  return { servers: config.servers.map(({ name, prefix }) => (prefix === undefined ? { name } : { name, prefix })) }
}

export function apply(ctx: Context, config: Config) {
  const servers = config.servers.map((server) => ({ server: server.name, prefix: toolPrefix(server) }))
  const registered = new Set<string>()
  ctx.on('replay/tool', (tool: string, _agent?: Agent) => {
    const from = servers.find(({ prefix }) => tool.startsWith(prefix) && tool.length > prefix.length)
    if (!from || registered.has(tool)) return
    registered.add(tool)
    ctx.tools.register({
      name: tool,
      description: `a tool of the MCP server "${from.server}", as a replay knows it: the name a recorded call gave`,
      parameters: { type: 'object' },
      output: { schema: {} },
      execute: () => {
        throw new Error('faber replay never runs a tool body')
      },
    })
  })
}

/** the stand-in faber replay starts in place of @faber/plugin-mcp */
export default { name, inject, reusable, Config, apply }
