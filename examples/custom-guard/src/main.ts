// run: pnpm exec tsx examples/custom-guard/src/main.ts (from the repository root)

import ToolRuntime, { createAgent, defineTool, t } from '@faber/core'
import { Context } from 'cordis'
import * as SecretsGuard from './index.ts'

const ctx = new Context()
ctx.plugin(ToolRuntime)
ctx.plugin(SecretsGuard, { cautious: ['reviewer'] })
await ctx.start()

ctx.tools.register(
  defineTool({
    name: 'http_get',
    description: 'pretends to fetch a URL',
    parameters: t.object({ url: t.string(), headers: t.record(t.string()).optional() }),
    output: { schema: t.string() },
    execute: ({ url }) => `fetched ${url}; the server echoed: token=sk-${'x'.repeat(24)}`,
  }),
)
ctx.tools.register(
  defineTool({
    name: 'delete_branch',
    description: 'pretends to delete a git branch',
    parameters: t.object({ branch: t.string() }),
    output: { schema: t.string() },
    annotations: { destructive: true },
    execute: ({ branch }) => `deleted ${branch}`,
  }),
)

const reviewer = createAgent(ctx, { name: 'reviewer' })
const call = (name: string, args: unknown, agent?: typeof reviewer) =>
  ctx.tools.execute({ callId: `${name}-${Math.random()}`, name, arguments: args, agent, signal: new AbortController().signal })

for (const [label, result] of [
  ['a secret in the arguments', await call('http_get', { url: 'https://example.com', headers: { authorization: `Bearer sk-${'a'.repeat(32)}` } })],
  ['a secret in the result', await call('http_get', { url: 'https://example.com' })],
  ['a destructive tool, cautious agent', await call('delete_branch', { branch: 'old' }, reviewer)],
  ['a destructive tool, no agent', await call('delete_branch', { branch: 'old' })],
] as const) {
  console.log(`${label}:\n  ${result.content}`)
}
await ctx.stop()
