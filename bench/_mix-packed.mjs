// bench/mix.ts's first run from the packed packages: run on plain node in a project that installed the tarballs with
// npm (no tsx anywhere). argv: <in-process | process>; stdout: one JSON line, the first run_code's ms right after start
const started = performance.now()
const { default: ToolRuntime, defineTool, t } = await import('@faber/core')
const { default: WorkerSandboxService } = await import('@faber/sandbox')
const { Context, Logger } = await import('cordis')
const importsMs = performance.now() - started
Logger.levels.base = 0
const ctx = new Context()
ctx.plugin(ToolRuntime, { mode: 'code' })
ctx.plugin(WorkerSandboxService, { isolation: process.argv[2] })
await ctx.start()
const read = defineTool({
  name: 'read',
  description: 'read',
  parameters: t.object({ path: t.string() }),
  output: { schema: t.unknown() },
  isConcurrencySafe: () => true,
  execute: ({ path }) => ({ path, content: 'text' }),
})
ctx.tools.register(read)
const from = performance.now()
const code = 'const [a, b] = await Promise.all([tools.read({ path: "a" }), tools.read({ path: "b" })])\nreturn a.content + b.content'
const result = await ctx.tools.execute({ callId: 'p1', name: 'run_code', arguments: { code, description: 'bench' }, signal: new AbortController().signal })
const firstMs = performance.now() - from
const firstFromStartMs = performance.now() - started
if (result.isError) throw new Error(result.error.message)
await ctx.stop()
process.stdout.write(`${JSON.stringify({ importsMs, firstMs, firstFromStartMs })}\n`)
process.exit(0)
