// what an MCP client is shown for the three npm servers' tools, straight from the servers and through Faber served
// under native and code mode (bytes of names + descriptions + input schemas as JSON), and the round trip of one small
// call: straight to the server (the baseline), through ctx.tools.execute, and through Faber served over MCP.

import { mkdtempSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Context, Logger } from 'cordis'
import ToolRuntime, { createAgent } from '../packages/core/src/index.ts'
import * as mcp from '../plugins/mcp/src/index.ts'
import { type ServerName, serverScript } from '../plugins/mcp/tests/fixtures/servers.ts'

// the SDK is a dependency of plugins/mcp, not of the root: resolve it from there
const require = createRequire(new URL('../plugins/mcp/package.json', import.meta.url))
const { Client } = await import(require.resolve('@modelcontextprotocol/sdk/client/index.js'))
const { StdioClientTransport } = await import(require.resolve('@modelcontextprotocol/sdk/client/stdio.js'))
const { InMemoryTransport } = await import(require.resolve('@modelcontextprotocol/sdk/inMemory.js'))

interface ListedTool {
  name: string
  description?: string
  inputSchema: unknown
}
interface McpClient {
  connect(transport: unknown): Promise<void>
  listTools(): Promise<{ tools: ListedTool[] }>
  callTool(params: { name: string; arguments: Record<string, unknown> }): Promise<{ isError?: boolean }>
  close(): Promise<void>
}

const SERVERS: ServerName[] = ['everything', 'filesystem', 'memory']
const CALLS = 100
const ROUNDS = 5

function serverArgs(name: ServerName, dir: string) {
  return name === 'filesystem' ? [serverScript(name), dir] : [serverScript(name)]
}

/** bytes of what a client is shown: names, descriptions and input schemas, as JSON */
function shownBytes(tools: ListedTool[]) {
  return Buffer.byteLength(JSON.stringify(tools.map(({ name, description, inputSchema }) => ({ name, description, inputSchema }))))
}

async function timeCalls(call: () => Promise<unknown>) {
  for (let i = 0; i < 20; i++) await call()
  const start = performance.now()
  for (let i = 0; i < CALLS; i++) await call()
  return (performance.now() - start) / CALLS
}

export async function benchMcp(): Promise<Record<string, number>> {
  Logger.levels.base = 0
  const dir = mkdtempSync(join(tmpdir(), 'faber-bench-mcp-'))
  const env = { MEMORY_FILE_PATH: join(dir, 'memory.jsonl') }
  const results: Record<string, number> = {}

  // the baseline: each server listed and called by the SDK client directly
  const direct: McpClient[] = []
  let rawShown = 0
  let rawFull = 0
  let rawTools = 0
  for (const name of SERVERS) {
    const client: McpClient = new Client({ name: 'bench', version: '1.0.0' })
    await client.connect(new StdioClientTransport({ command: process.execPath, args: serverArgs(name, dir), env, stderr: 'ignore' }))
    const { tools } = await client.listTools()
    rawShown += shownBytes(tools)
    rawFull += Buffer.byteLength(JSON.stringify(tools))
    rawTools += tools.length
    direct.push(client)
  }

  // the same servers imported into one deployment and served to two agents, one per mode
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  await ctx.start()
  ctx.plugin(mcp, { servers: SERVERS.map((name) => ({ name, command: process.execPath, args: serverArgs(name, dir), env })) })
  await ctx.lifecycle.flush()
  createAgent(ctx, { name: 'native' })
  createAgent(ctx, { name: 'code' }).ctx.tools.presentAs('code')
  const served: Record<string, { client: McpClient; close(): Promise<void> }> = {}
  for (const agent of ['native', 'code']) {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair()
    const serving = await mcp.serveMcp(ctx, { agent, transport: serverSide })
    const client: McpClient = new Client({ name: 'bench', version: '1.0.0' })
    await client.connect(clientSide)
    served[agent] = { client, close: () => serving.close() }
    const { tools } = await client.listTools()
    results[`mcp.shown.${agent}.bytes`] = shownBytes(tools)
    results[`mcp.shown.${agent}.tools`] = tools.length
  }
  results['mcp.shown.servers.bytes'] = rawShown
  results['mcp.shown.servers.fullBytes'] = rawFull
  results['mcp.shown.servers.tools'] = rawTools
  results['mcp.sdk.bytes'] = Buffer.byteLength(ctx.tools.sdkDeclarations())
  results['mcp.shown.code.ratio'] = results['mcp.shown.code.bytes'] / results['mcp.shown.native.bytes']

  // one echo round trip, three ways, in alternating rounds; the median round of each counts
  const signal = new AbortController().signal
  const ways: Record<string, () => Promise<unknown>> = {
    direct: () => direct[0].callTool({ name: 'echo', arguments: { message: 'hi' } }),
    execute: () => ctx.tools.execute({ callId: 'bench', name: 'everything__echo', arguments: { message: 'hi' }, signal }),
    served: () => served.native.client.callTool({ name: 'everything__echo', arguments: { message: 'hi' } }),
  }
  const rounds: Record<string, number[]> = { direct: [], execute: [], served: [] }
  for (let round = 0; round < ROUNDS; round++) for (const [way, call] of Object.entries(ways)) rounds[way].push(await timeCalls(call))
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]
  for (const way of Object.keys(ways)) results[`mcp.call.${way}.ms`] = median(rounds[way])
  results['mcp.call.execute.ratio'] = results['mcp.call.execute.ms'] / results['mcp.call.direct.ms']
  results['mcp.call.served.ratio'] = results['mcp.call.served.ms'] / results['mcp.call.direct.ms']

  for (const { client, close } of Object.values(served)) {
    await client.close()
    await close()
  }
  await ctx.stop()
  for (const client of direct) await client.close()
  return results
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const r = await benchMcp()
  const kb = (n: number) => `${(n / 1024).toFixed(1)} KiB`
  console.log(`what a client is shown for the ${r['mcp.shown.servers.tools']} tools of server-everything, -filesystem and -memory:`)
  console.log(
    `  straight from the servers: ${kb(r['mcp.shown.servers.bytes'])} (${kb(r['mcp.shown.servers.fullBytes'])} with titles, output schemas, annotations)`,
  )
  console.log(`  Faber, native mode:        ${kb(r['mcp.shown.native.bytes'])} in ${r['mcp.shown.native.tools']} tools`)
  console.log(
    `  Faber, code mode:          ${kb(r['mcp.shown.code.bytes'])} in ${r['mcp.shown.code.tools']} tool (run_code; SDK ${kb(r['mcp.sdk.bytes'])}), ${r['mcp.shown.code.ratio'].toFixed(2)}x native`,
  )
  console.log(`echo round trip, median of ${ROUNDS} rounds of ${CALLS} calls: direct ${r['mcp.call.direct.ms'].toFixed(3)} ms`)
  console.log(`  via ctx.tools.execute:     ${r['mcp.call.execute.ms'].toFixed(3)} ms (${r['mcp.call.execute.ratio'].toFixed(2)}x)`)
  console.log(`  via Faber served over MCP: ${r['mcp.call.served.ms'].toFixed(3)} ms (${r['mcp.call.served.ratio'].toFixed(2)}x)`)
  process.exit(0)
}
