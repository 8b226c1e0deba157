// Faber's MCP client under the conformance suite's client scenarios: `conformance client --command "node --import
// tsx client.ts"` appends the test server's URL and names the scenario in MCP_CONFORMANCE_SCENARIO. A deployment
// imports that server through @faber/plugin-mcp, with @faber/plugin-approval and an answerer that accepts every
// form without changes (so the schema's defaults are what is answered), then calls each imported tool once,
// through the pipeline, with arguments made from its schema.

import ToolRuntime, { type JsonSchema } from '@faber/core'
import Approval from '@faber/plugin-approval'
import { Context, Logger } from 'cordis'
import * as mcp from '../../src/index.ts'

Logger.levels.base = Number(process.env.FABER_LOG_LEVEL ?? 1)
const url = process.argv.at(-1)
if (!url?.startsWith('http')) throw new Error('usage: client.ts <server url>')

/** a value of the schema's type, good enough for the suite's tools */
function sample(schema: JsonSchema): unknown {
  const s = schema as { type?: string; properties?: Record<string, JsonSchema>; enum?: unknown[] }
  if (s.enum?.length) return s.enum[0]
  if (s.type === 'number' || s.type === 'integer') return 2
  if (s.type === 'boolean') return true
  if (s.type === 'string') return 'x'
  if (s.type === 'array') return []
  return Object.fromEntries(Object.entries(s.properties ?? {}).map(([key, value]) => [key, sample(value)]))
}

const ctx = new Context()
ctx.plugin(ToolRuntime, { mode: 'native' })
ctx.plugin(Approval, { require: [] })
ctx.plugin({
  name: 'accept-forms',
  apply: (inner: Context) => inner.on('approval/elicit', () => ({ action: 'accept' as const })),
})
ctx.on('approval/elicited', (event) => console.error(`form from ${event.source}: ${event.action}, defaults for ${event.defaulted.join(', ') || 'none'}`))
// auth/* scenarios: the suite's server requires OAuth. This process is also the person: it opens each printed
// authorization URL (the suite's authorization server consents at once and redirects to the callback on 127.0.0.1)
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? ''
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || '{}') as {
  client_id?: string
  client_secret?: string
  private_key_pem?: string
  signing_algorithm?: string
}
const auth: Partial<mcp.McpAuth> | undefined = scenario.startsWith('auth/')
  ? {
      interactive: true,
      ...(scenario.startsWith('auth/client-credentials') ? { grant: 'client_credentials' as const } : {}),
      ...(context.client_id ? { clientId: context.client_id, clientSecret: context.client_secret } : {}),
      ...(context.private_key_pem ? { privateKey: context.private_key_pem, signingAlgorithm: context.signing_algorithm } : {}),
      // the suite's expected client ID metadata document (its server advertises support and never fetches it)
      ...(scenario === 'auth/basic-cimd' ? { clientMetadataUrl: 'https://conformance-test.local/client-metadata.json' } : {}),
    }
  : undefined
ctx.on('mcp/authorize', ({ url }) => {
  fetch(url).then(
    (response) => console.error(`authorized through ${new URL(url).origin}: the callback answered ${response.status}`),
    (error) => console.error(`opening the authorization URL failed: ${error}`),
  )
})
ctx.plugin(mcp, { servers: [{ name: 'suite', url, prefix: '', auth }], restart: { maxAttempts: 0 } })
await ctx.start()
let failed = false
for (const tool of ctx.tools.schemas()) {
  const result = await ctx.tools.execute({ callId: tool.name, name: tool.name, arguments: sample(tool.parameters), signal: new AbortController().signal })
  console.error(`${tool.name}: ${result.content.slice(0, 200)}`)
  failed ||= result.isError
}
await ctx.stop()
process.exitCode = failed ? 1 : 0
