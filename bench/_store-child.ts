// run by bench/store.ts as another process of the same deployment: approval over the store given (a file or a
// postgres:// URL). for each `watch <tool>` line on stdin it checks `<tool>` against the grants as a request would,
// once per turn of its event loop, and prints `seen <ms since the epoch>` once no grant allows it any more.

import { createInterface } from 'node:readline'
import ToolRuntime, { assertStarted } from '@faber/core'
import Approval from '@faber/plugin-approval'
import DeploymentStore from '@faber/store'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0
const [location] = process.argv.slice(2)
const ctx = new Context()
ctx.plugin(ToolRuntime)
ctx.plugin(DeploymentStore, location.startsWith('postgres://') ? { url: location } : { path: location })
ctx.plugin(Approval, {})
await ctx.start()
await assertStarted(ctx)
const approval = ctx.approval as Approval
const now = () => performance.timeOrigin + performance.now()
process.stdout.write('ready\n')
for await (const line of createInterface({ input: process.stdin })) {
  const [command, tool] = line.split(' ')
  if (command !== 'watch') break
  while (!(await approval.match({ tool, arguments: {} }))) await new Promise((resolve) => setImmediate(resolve))
  process.stdout.write('watching\n')
  while (await approval.match({ tool, arguments: {} })) await new Promise((resolve) => setImmediate(resolve))
  process.stdout.write(`seen ${now()}\n`)
}
await ctx.stop()
