// a tiny timing harness: best-of-rounds per-op time, so a shared, noisy machine disturbs the figure less.
// figures are printed next to a baseline measured in the same run, as a ratio.

import ToolRuntime, { type CodeRuntime, defineTool, t } from '@faber/core'
import { Context } from 'cordis'

export async function timeOp(op: () => unknown | Promise<unknown>, iterations: number, rounds = 5): Promise<number> {
  for (let i = 0; i < Math.min(iterations, 2000); i++) await op()
  let best = Number.POSITIVE_INFINITY
  for (let round = 0; round < rounds; round++) {
    const start = process.hrtime.bigint()
    for (let i = 0; i < iterations; i++) await op()
    const ns = Number(process.hrtime.bigint() - start) / iterations
    best = Math.min(best, ns)
  }
  return best / 1000
}

/**
 * the best per-op time of each of `ops` (µs), measured as timeOp does but in alternating rounds: a burst of load falls
 * on all of them alike, so a difference between two of them is the difference in what they do
 */
export async function timeAlternating(ops: (() => unknown | Promise<unknown>)[], iterations: number, rounds = 5): Promise<number[]> {
  for (const op of ops) for (let i = 0; i < Math.min(iterations, 2000); i++) await op()
  const best = ops.map(() => Number.POSITIVE_INFINITY)
  for (let round = 0; round < rounds; round++) {
    for (const [index, op] of ops.entries()) {
      const start = process.hrtime.bigint()
      for (let i = 0; i < iterations; i++) await op()
      best[index] = Math.min(best[index], Number(process.hrtime.bigint() - start) / iterations)
    }
  }
  return best.map((ns) => ns / 1000)
}

export function row(label: string, micros: number, baseline: number, target?: string) {
  const figure = micros >= 1000 ? `${(micros / 1000).toFixed(2)} ms` : `${micros.toFixed(2)} µs`
  const ratio = `${(micros / baseline).toFixed(1)}× baseline`
  console.log(`  ${label.padEnd(48)} ${figure.padStart(11)}  ${ratio.padStart(16)}${target ? `   (target ${target})` : ''}`)
}

/**
 * the row under a figure that includes costs cordis 3.18 sets (its floors, each timed alone in the same run): Faber's
 * part, the figure less those floors, which is what a target for Faber's own path is about
 */
export function faberPart(micros: number, floors: number, baseline: number, target?: string) {
  row("  Faber's part (less cordis' floors in it)", Math.max(0, micros - floors), baseline, target)
}

/** the middle value (the mean of the two middle ones for an even count); `values` is left as it is */
export function median(values: number[]) {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = sorted.length >> 1
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

export const isMain = (url: string) => url === `file://${process.argv[1]}`

/** the benches' cheapest tool: `{ a, b }` in, their sum out, so what a row measures is the path around the body */
export function addTool(name = 'add', options: { description?: string; concurrencySafe?: boolean } = {}) {
  return defineTool({
    name,
    description: options.description ?? 'adds two numbers',
    parameters: t.object({ a: t.number(), b: t.number() }),
    output: { schema: t.number() },
    ...(options.concurrencySafe ? { isConcurrencySafe: () => true } : {}),
    execute: ({ a, b }) => a + b,
  })
}

/** the benches' no-op tool: `{ i? }` in, null out, concurrency-safe, so what a row measures is the path around the body */
export function nopTool(name: string, description: string) {
  return defineTool({
    name,
    description,
    parameters: t.object({ i: t.integer().optional() }),
    output: { schema: t.null() },
    isConcurrencySafe: () => true,
    execute: () => null,
  })
}

// a code runtime with no boundary: the "program" awaits its `add` bindings one after another, `calls` times a run
class InProcess implements CodeRuntime {
  readonly backend = 'in-process'
  constructor(private calls: number) {}

  async run(request: Parameters<CodeRuntime['run']>[0]) {
    for (let i = 0; i < this.calls; i++) {
      const reply = await request.call('add', '{"a":1,"b":2}')
      if (!reply.ok) return { ok: false as const, kind: 'exception' as const, message: reply.message, logs: [] }
    }
    return { ok: true as const, logs: [], result: '3' }
  }
}

/**
 * the seam benches' deployment: the runtime in both modes, the concurrency-safe addTool, and a run_code whose program
 * makes `nested` sequential calls of it through the bridge with no sandbox, so no hand-off is in a nested call's figure
 */
export async function seamDeployment(nested: number) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'both' })
  ctx.set('codeRuntime', new InProcess(nested))
  await ctx.start()
  ctx.tools.register(addTool('add', { concurrencySafe: true }))
  return ctx
}
