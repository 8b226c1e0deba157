// `faber mcp login`: one server of a deployment, connected on its own with a person at hand, so its OAuth client and
// tokens land in the deployment's store; the deployment's later runs use (and refresh) them without asking anyone.

import ToolRuntime from '@faber/core'
import type { DeploymentStore } from '@faber/store'
import { Context } from 'cordis'
import * as client from './client.ts'
import { OAuthTable } from './oauth.ts'

export interface LoginOptions {
  server: client.McpClientServer
  /** where the deployment's store is (its @faber/store config); without one the tokens would die with this process */
  store: DeploymentStore.ConfigInput
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
  /** where it is kept: the store's file or (password masked) URL */
  where: string
  /** what is kept now, secrets masked */
  saved?: Awaited<ReturnType<OAuthTable['list']>>[number]
}

export async function login(options: LoginOptions): Promise<LoginResult> {
  const { server } = options
  if (!server.url) throw new TypeError(`server "${server.name}" is a stdio server: only URL servers log in`)
  // loaded here: the store's native addon is needed only by those who log in (or load the store themselves)
  const { default: DeploymentStore, openStore } = await import('@faber/store')
  const url = new URL(server.url).href
  const before = await openStore(options.store)
  try {
    const table = new OAuthTable(before)
    const record = table.record(server.name, url)
    if (options.fresh) await table.remove(server.name)
    // a step-up nobody signed in for: the grant in hand is too small, so the person signs in again (for both scopes)
    else if ((await record.read()).wanted) await record.write({ tokens: undefined })
  } finally {
    await before.close()
  }
  const ctx = new Context()
  ctx.plugin(ToolRuntime)
  ctx.plugin(DeploymentStore, options.store)
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
  const store = await openStore(options.store)
  try {
    const saved = (await new OAuthTable(store).list()).find((row) => row.server === server.name && row.url === url)
    return { ok, tools: last?.tools ?? [], error: ok ? undefined : (last?.error ?? 'the server did not connect'), where: store.path, saved }
  } finally {
    await store.close()
  }
}
