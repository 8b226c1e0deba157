// run under a real pseudo-terminal by terminal.spec.ts: the terminal answerer on process.stdin / process.stdout
import ToolRuntime, { defineTool, t } from '@faber/core'
import Approval, { TerminalAnswerer } from '@faber/plugin-approval'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0
// as under a chat's line editor: Enter arrives as \r, Ctrl-C as \x03, nothing is echoed by the terminal
if (process.env.RAW_MODE) process.stdin.setRawMode(true)
const ctx = new Context()
ctx.plugin(ToolRuntime)
ctx.plugin(Approval, { require: ['write'] })
ctx.plugin(TerminalAnswerer, {})
await ctx.start()
ctx.tools.register(
  defineTool({
    name: 'write',
    description: 'writes',
    parameters: t.object({ path: t.string() }),
    output: { schema: t.string() },
    execute: ({ path }) => `wrote ${path}`,
  }),
)
const result = await ctx.tools.execute({ callId: 'c1', name: 'write', arguments: { path: 'notes.md' }, signal: new AbortController().signal })
console.log(`RESULT ${result.content}`)
if (process.env.RAW_MODE) process.stdin.setRawMode(false)
await ctx.stop()
