// `faber mcp login`: one server of a deployment, connected on its own with a person at hand, so its OAuth client and
// tokens land in the deployment's store; the deployment's later runs use (and refresh) them without asking anyone.

import ToolRuntime from '@faber/core'
import DeploymentStore, { Store } from '@faber/store'
import { Context } from 'cordis'
import * as client from './client.ts'
import { OAuthTable } from './oauth.ts'

export interface LoginOptions {
  server: client.McpClientServer
  /** the deployment's store file; without one the tokens would die with this process, so it is required */
  store: string
  /** shows the person the URL to open */
  open(url: string): void
  /** forget what is kept first, so the person authorizes afresh (another account, a larger scope) */
  fresh?: boolean
}

export interface LoginResult {
  ok: boolean
  /** the tools the server listed once authorized */
  tools: string[]
  error?: string
  /** what is kept now, secrets masked */
  saved?: ReturnType<OAuthTable['list']>[number]
}

export async function login(options: LoginOptions): Promise<LoginResult> {
  const { server } = options
  if (!server.url) throw new TypeError(`server "${server.name}" is a stdio server: only URL servers log in`)
  if (options.fresh) {
    const store = new Store(options.store)
    try {
      new OAuthTable(store).remove(server.name)
    } finally {
      store.close()
    }
  }
  const ctx = new Context()
  ctx.plugin(ToolRuntime)
  ctx.plugin(DeploymentStore, { path: options.store })
  let last: client.McpStatus | undefined
  ctx.on('mcp/status', (status) => void (last = status))
  ctx.on('mcp/authorize', ({ url }) => options.open(url))
  ctx.plugin(client, { servers: [{ ...server, auth: { ...server.auth, interactive: true } }], restart: { maxAttempts: 0 } })
  try {
    await ctx.start()
  } finally {
    await ctx.stop()
  }
  const ok = last?.state === 'ready'
  const store = new Store(options.store)
  try {
    const saved = new OAuthTable(store).list().find((row) => row.server === server.name && row.url === new URL(server.url ?? '').href)
    return { ok, tools: last?.tools ?? [], error: ok ? undefined : (last?.error ?? 'the server did not connect'), saved }
  } finally {
    store.close()
  }
}
