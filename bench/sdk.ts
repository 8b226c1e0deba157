// renders Code Mode SDKs for synthetic tool sets; the floor is JSON.stringify of the same schemas in the same run

import type { JsonSchema } from '../packages/core/src/schema.ts'
import { renderSdk, type SdkTool } from '../packages/core/src/sdk.ts'

const SIZES = [10, 100, 1000]

function syntheticTool(i: number): SdkTool {
  const item: JsonSchema = { type: 'object', properties: { id: { type: 'string' }, score: { type: 'number' } }, required: ['id'] }
  const shapes: JsonSchema[] = [
    { type: 'object', properties: { path: { type: 'string', description: 'file path' }, limit: { type: 'integer', minimum: 1 } }, required: ['path'] },
    { type: 'object', properties: { mode: { enum: ['fast', 'slow', 'auto'] }, tags: { type: 'array', items: { type: ['string', 'null'] } } } },
    { type: 'object', properties: { query: { anyOf: [{ type: 'string' }, item] }, items: { type: 'array', items: item } }, additionalProperties: false },
    { type: 'object', properties: { name: { type: 'string' } }, additionalProperties: { type: 'number' } },
  ]
  return {
    name: `${['fs', 'net', 'db', 'git'][i % 4]}${i % 3 === 0 ? '.' : '_'}tool-${i}`,
    description: `Tool number ${i}.\nDoes something useful with its arguments and returns a structured result.`,
    // fresh objects per tool, as a registry holds them
    parameters: structuredClone(shapes[i % shapes.length]),
    output: structuredClone(shapes[(i + 1) % shapes.length]),
  }
}

/** mean milliseconds per call of fn, after a warm-up, over at least ~200 ms */
function measure(fn: () => unknown): number {
  for (let i = 0; i < 20; i++) fn()
  let runs = 0
  const start = performance.now()
  let elapsed = 0
  while (elapsed < 200 || runs < 20) {
    fn()
    runs++
    elapsed = performance.now() - start
  }
  return elapsed / runs
}

export async function benchSdk(): Promise<Record<string, number>> {
  const results: Record<string, number> = {}
  for (const size of SIZES) {
    const tools = Array.from({ length: size }, (_, i) => syntheticTool(i))
    // renderSdk keeps the text of schema objects it has seen; a cold render needs schema objects it has not
    const copies = Array.from({ length: Math.max(40, Math.ceil(20000 / size)) }, () =>
      tools.map((tool) => ({ ...tool, ...structuredClone({ parameters: tool.parameters, output: tool.output }) })),
    )
    let next = 0
    const render = measure(() => renderSdk(copies[next++ % copies.length]))
    const floor = measure(() => JSON.stringify(tools))
    results[`sdk.render.${size}.ms`] = render
    results[`sdk.render.${size}.ratio`] = render / floor
  }
  return results
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const results = await benchSdk()
  for (const size of SIZES) {
    const ms = results[`sdk.render.${size}.ms`]
    const ratio = results[`sdk.render.${size}.ratio`]
    console.log(`renderSdk ${String(size).padStart(4)} tools: ${ms.toFixed(3)} ms/render, ${ratio.toFixed(1)}x JSON.stringify`)
  }
}
