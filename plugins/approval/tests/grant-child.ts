// run by store.spec.ts as a separate process: records `always` grants in a shared store and prints `ack <id>` once
// each is committed. usage: grant-child.ts <store file | postgres:// URL> <prefix> <count | forever>; waits for a line on
// stdin before starting.
import ToolRuntime, { assertStarted } from '@faber/core'
import Approval from '@faber/plugin-approval'
import DeploymentStore from '@faber/store'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0
const [path, prefix, count] = process.argv.slice(2)
const ctx = new Context()
ctx.plugin(ToolRuntime)
ctx.plugin(DeploymentStore, path.startsWith('postgres://') ? { url: path } : { path })
ctx.plugin(Approval, {})
await ctx.start()
await assertStarted(ctx)
const approval = ctx.approval as Approval
process.stdout.write('ready\n')
await new Promise((resolve) => process.stdin.once('data', resolve))
const limit = count === 'forever' ? Number.POSITIVE_INFINITY : Number(count)
for (let i = 0; i < limit; i++) {
  // a long pattern makes each write span several pages, so a kill is likely to land inside one
  const grant = await approval.grant({ tool: `${prefix}-${i}`, arguments: { '$.note': 'x'.repeat(i % 7 === 0 ? 9000 : 10) }, scope: 'always' })
  process.stdout.write(`ack ${grant.id}\n`)
}
await ctx.stop()
process.stdin.destroy()
