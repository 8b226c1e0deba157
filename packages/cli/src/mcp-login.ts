// `faber mcp login <server>` and `faber mcp logout <server>`: OAuth for a server the deployment imports. login connects
// to that server alone, prints the URL to open, waits on a 127.0.0.1 callback, and keeps the client and tokens in the
// deployment's store; logout forgets them. Tokens are never printed, only masked.

import type { McpClientServer } from '@faber/plugin-mcp'
import { type DeploymentSpec, deploymentStore, loadDeploymentFile } from './deployment.ts'

export class McpLoginUsageError extends Error {}

/** every server the deployment's @faber/plugin-mcp entries import, global and per agent */
function importedServers(spec: DeploymentSpec): McpClientServer[] {
  const entries = [...spec.plugins, ...spec.agents.flatMap((agent) => agent.plugins)]
  return entries
    .filter((entry) => entry.use === '@faber/plugin-mcp')
    .flatMap((entry) => ((entry.config as { servers?: McpClientServer[] } | undefined)?.servers ?? []).filter((s) => s && typeof s.name === 'string'))
}

export async function mcpLogin(
  action: 'login' | 'logout',
  name: string | undefined,
  file: string,
  options: { fresh?: boolean },
  out: NodeJS.WritableStream = process.stdout,
): Promise<number> {
  if (!name) throw new McpLoginUsageError(`faber mcp ${action}: which server? Usage: faber mcp ${action} <server> [deployment.yml]`)
  const spec = await loadDeploymentFile(file)
  const servers = importedServers(spec)
  const server = servers.find((s) => s.name === name)
  if (!server) {
    const known = servers.map((s) => s.name)
    throw new McpLoginUsageError(
      `faber mcp ${action}: ${spec.source} imports no MCP server named "${name}"; ${known.length ? `its servers: ${known.join(', ')}` : 'it imports none'}`,
    )
  }
  if (!server.url) throw new McpLoginUsageError(`faber mcp ${action}: "${name}" is a stdio server; only streamable HTTP (url) servers use OAuth`)
  const store = deploymentStore(spec, 'there is nowhere to keep the tokens; add one')
  const mcp = await import('@faber/plugin-mcp')
  if (action === 'logout') {
    const { openStore } = await import('@faber/store')
    const opened = await openStore(store)
    try {
      const removed = await new mcp.OAuthTable(opened).remove(name)
      out.write(removed ? `forgot the OAuth client and tokens of "${name}" kept in ${opened.path}\n` : `nothing was kept for "${name}" in ${opened.path}\n`)
      return 0
    } finally {
      await opened.close()
    }
  }
  const result = await mcp.login({
    server,
    store,
    fresh: options.fresh,
    open: (url) => out.write(`To authorize Faber for "${name}", open this URL in a browser:\n\n  ${url}\n\nWaiting for the authorization…\n`),
  })
  if (!result.ok) {
    process.stderr.write(`faber mcp login: "${name}" did not connect: ${result.error}\n`)
    return 1
  }
  const saved = result.saved
  const detail = saved?.accessToken
    ? `access token ${saved.accessToken}${saved.scope ? `, scope "${saved.scope}"` : ''}${saved.refreshToken ? ', refreshable' : ''}${saved.expiresAt ? `, expires ${new Date(saved.expiresAt).toISOString()}` : ''}`
    : 'the server asked for no authorization'
  out.write(`logged in to "${name}" (${result.tools.length} tools): ${detail}; kept in ${result.where}\n`)
  return 0
}
