// one backend and tier of bench/mix.ts, in a process of its own (its first run_code is a fresh process's):
// argv: <worker | isolate | quickjs> <in-process | process>; env MIX_PROGRAM (the demo's program), MIX_FILES (its files
// as JSON). stdout: one JSON line of figures. every program goes through core's run_code, the full pipeline
const started = performance.now()
const { default: ToolRuntime, defineTool, t } = await import('@faber/core')
type Json = import('@faber/core').Json
const { Context, Logger } = await import('cordis')
const [backend, isolation] = process.argv.slice(2) as ['worker' | 'isolate' | 'quickjs', 'in-process' | 'process']
const sandbox =
  backend === 'worker'
    ? await import('@faber/sandbox')
    : backend === 'isolate'
      ? await import('@faber/sandbox-isolate')
      : await import('@faber/sandbox-quickjs')
const importsMs = performance.now() - started
Logger.levels.base = 0

const limits = { cpuMs: 5000, wallMs: 30000, memoryMb: 64, outputBytes: 64 * 1024 }
const program = process.env.MIX_PROGRAM ?? ''
const demoFiles: Record<string, string> = JSON.parse(process.env.MIX_FILES ?? '{}')
let files = new Map<string, string>()
const path = t.object({ path: t.string() })
const tool = (name: string, parameters: ReturnType<typeof t.object>, execute: (input: any) => Json) =>
  defineTool({ name, description: name, parameters, output: { schema: t.unknown() }, isConcurrencySafe: () => true, execute })
// the demo's tools over files in memory, an echo, and 1 MB of JSON rows
const rows = Array.from({ length: 10_000 }, (_, i) => ({ id: i, name: `row ${i}`, tags: ['a', 'b'], score: i % 97 }))
const tools = [
  tool('read', path, ({ path }) => ({ path, content: files.get(path) ?? '' })),
  tool('list', t.object({}), () => ({ entries: [...files.keys()].map((name) => ({ name })) })),
  tool('edit', t.object({ path: t.string(), oldString: t.string(), newString: t.string() }), ({ path, oldString, newString }) => {
    const text = files.get(path) ?? ''
    if (!text.includes(oldString)) throw new Error(`oldString not found in ${path}`)
    files.set(path, text.replace(oldString, newString))
    return { path }
  }),
  tool('write', t.object({ path: t.string(), content: t.string() }), ({ path, content }) => {
    files.set(path, content)
    return { path }
  }),
  tool('echo', t.object({ i: t.integer().optional() }), () => null),
  tool('rows', t.object({}), () => rows),
]

const ctx = new Context()
ctx.plugin(ToolRuntime, { mode: 'code' })
ctx.plugin(sandbox.default, { isolation, limits })
await ctx.start()
for (const each of tools) ctx.tools.register(each)
const signal = new AbortController().signal
let ids = 0
// wall ms and the host process's cpu ms (all its threads; on the process tier not the sandbox process's)
const run = async (code: string) => {
  files = new Map(Object.entries(demoFiles))
  const cpu = process.cpuUsage()
  const from = performance.now()
  // each run a text of its own, as a model's programs are
  const result = await ctx.tools.execute({ callId: `m${++ids}`, name: 'run_code', arguments: { code: `${code}\n// ${ids}`, description: 'bench' }, signal })
  const ms = performance.now() - from
  const used = process.cpuUsage(cpu)
  if (result.isError) throw new Error(`${backend} ${isolation}: ${result.error.message}`)
  return { ms, cpuMs: (used.user + used.system) / 1000 }
}

const first = await run(program)
const firstFromStartMs = performance.now()
const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]
const mix: Record<string, string> = {
  return1: 'return 1',
  demo: program,
  sequential20: 'let n = 0\nfor (let i = 0; i < 20; i++) { await tools.echo({ i }); n++ }\nreturn n',
  sequential1000: 'let n = 0\nfor (let i = 0; i < 1000; i++) { await tools.echo({ i }); n++ }\nreturn n',
  all1000: 'return (await Promise.all(Array.from({ length: 1000 }, (_, i) => tools.echo({ i })))).length',
  json1MB:
    'const rows = await tools.rows({})\nconst top = rows.filter((r) => r.score > 90).map((r) => ({ id: r.id, name: r.name.toUpperCase() }))\nreturn { rows: rows.length, top: top.length, first: top[0] }',
}
const figures: Record<string, { ms: number; cpuMs: number; rssMb: number }> = {}
for (const [name, code] of Object.entries(mix)) {
  const runs = []
  for (let i = 0; i < 12; i++) runs.push(await run(code))
  const kept = runs.slice(2)
  figures[name] = { ms: median(kept.map((r) => r.ms)), cpuMs: median(kept.map((r) => r.cpuMs)), rssMb: Math.round(process.memoryUsage().rss / 2 ** 20) }
}
// a fan-out of 100,000 calls, once, under the limits above (core's defaultCodeLimits: what a deployment gets by default)
files = new Map()
const fanOut = 'return (await Promise.all(Array.from({ length: 100000 }, (_, i) => tools.echo({ i })))).length'
const fanFrom = performance.now()
const fan = await ctx.tools.execute({ callId: 'fan', name: 'run_code', arguments: { code: fanOut, description: 'bench' }, signal })
const all100k = { ms: performance.now() - fanFrom, ok: !fan.isError, error: fan.isError ? fan.error.message.slice(0, 120) : undefined }
await ctx.stop()
process.stdout.write(`${JSON.stringify({ importsMs, firstMs: first.ms, firstCpuMs: first.cpuMs, firstFromStartMs, ...figures, all100k })}\n`)
process.exit(0)

export {}
