// warming the host's run_code path once per process. the first run_code in a process otherwise finds it cold — the type
// stripper (swc's wasm, compiled function by function as a program first needs it: ~10 ms for the first program), the
// pipeline, the bridge, the scheduler and the json snapshots (bytecode compiled on first call) — and costs several warm
// runs. here one program that reads like a model's takes the whole path in a private context: no listener, guard,
// observer, logger or inspector of a deployment is in it, so none of them sees the run or its calls. its code runtime
// is scripted (the calls such a program makes, answered by the pipeline): no sandbox is used or waited for, and no
// deployment's run ever waits for a unit this took. the sandbox's own side is warmed by its pool. a few programs of
// other shapes are then stripped, and the event loop turns a few times before it resolves (see `shapes`, SETTLE_TURNS):
// in fresh processes this took the first run after ready() from 4-7x a warm one to 1.3-1.9x (bench nested)

import { Context } from 'cordis'
import type { BridgeReply, CodeRunOutcome, CodeRunRequest, CodeRuntime } from './code-runtime.ts'
import ToolRuntime from './runtime.ts'
import { t } from './schema.ts'
import { stripTypes } from './strip.ts'
import { defineTool, RUN_CODE } from './tool.ts'

// typed, with what programs write most (interfaces, generics, casts, arrow functions, destructuring, template literals,
// try/catch, optional chaining), so that the stripper has compiled what they need
const program = `interface Entry { name: string; size?: number }
type Pair<T> = [key: string, value: T]
const listed = (await tools.list({ path: '.' })) as Entry[]
const sizes: Pair<number>[] = await Promise.all(
  listed.map(async ({ name }): Promise<Pair<number>> => [name, ((await tools.size({ name })) as number) ?? 0]),
)
let total = 0
for (const [, size] of sizes) total += size!
try {
  await tools.size({ name: 1 as unknown as string })
} catch (error: unknown) {
  console.log(\`\${(error as Error).name}: \${sizes.length} entries\`)
}
const largest = sizes.filter(([key]) => key?.length > 0).sort((a, b) => b[1] - a[1])[0]
return { total, largest: largest?.[0] ?? null }`

// what a sandbox would report running it: the calls in the program's order, one of them refused by validation
const scripted: CodeRuntime = {
  backend: 'warm-up',
  async run({ call }: CodeRunRequest): Promise<CodeRunOutcome> {
    const replies: BridgeReply[] = [await call('list', '{"path":"."}')]
    replies.push(...(await Promise.all([call('size', '{"name":"a"}'), call('size', '{"name":"b"}')])))
    const refused = await call('size', '{"name":1}')
    if (replies.some((reply) => !reply.ok) || refused.ok) return { ok: false, kind: 'crash', message: 'the warm-up went another way', logs: [] }
    return { ok: true, logs: ['ToolCallError: 2 entries'], result: '{"total":2,"largest":"a"}' }
  },
}

// programs of other shapes, only stripped: a short one, and the two ways a program fails to strip (a syntax error, an
// enum). swc compiles its wasm function by function as a program first needs them: after the program above alone, the
// first trivial program still took 3-5 ms to strip (5 ms the median in fresh processes), against 0.2 ms
const shapes = ['return 1', 'const n = (await tools.count({})) as number\nreturn n + 1', 'const = 1', 'enum E { A }\nreturn E.A']

// turns of the event loop after the warm-up: what V8 queued for this thread while it ran (optimised code to install,
// the tier-up of the stripper's wasm) runs in them, not in the deployment's first run
const SETTLE_TURNS = 5
const turn = () => new Promise((resolve) => setTimeout(resolve, 1))

const list = defineTool({
  name: 'list',
  description: 'lists entries',
  parameters: t.object({ path: t.string() }),
  output: { schema: t.array(t.object({ name: t.string() })) },
  isConcurrencySafe: () => true,
  execute: () => [{ name: 'a' }, { name: 'b' }],
})

// a body that answers later, as most tools do
const size = defineTool({
  name: 'size',
  description: 'the size of an entry',
  parameters: t.object({ name: t.string() }),
  output: { schema: t.integer() },
  isConcurrencySafe: () => true,
  execute: async ({ name }) => name.length,
})

let warm = false
// the warm-up in progress: a caller that comes meanwhile waits for it
let warming: Promise<boolean> | undefined

/**
 * takes one program through the whole run_code path in a private context, once per process; resolves with whether the
 * path is warm (now or before; a call while another is warming it waits for that one; false when it could not), and
 * never rejects. a sandbox calls it once its pool is warm, so that a deployment's first run_code costs what a warm one
 * does
 */
export function warmRunCode(): Promise<boolean> {
  if (warm) return Promise.resolve(true)
  warming ??= warmUp().then((ran) => {
    warm = ran
    warming = undefined
    return ran
  })
  return warming
}

async function warmUp(): Promise<boolean> {
  let ran = false
  const ctx = new Context()
  try {
    ctx.plugin(ToolRuntime, { mode: 'code' })
    ctx.set('codeRuntime', scripted)
    await ctx.start()
    ctx.tools.register(list)
    ctx.tools.register(size)
    const signal = new AbortController().signal
    const result = await ctx.tools.execute({ callId: 'warm-up', name: RUN_CODE, arguments: { code: program, description: 'warm-up' }, signal })
    ran = !result.isError
    for (const shape of shapes) stripTypes(shape)
  } catch {
  } finally {
    await ctx.stop().catch(() => {})
    for (let i = 0; i < SETTLE_TURNS; i++) await turn()
  }
  return ran
}
