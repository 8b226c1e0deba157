// the snapshot every call takes of its arguments and of its result (packages/core/src/json.ts), against a
// JSON.stringify + JSON.parse round trip of the same value in the same run (the cheapest deep copy node has).

import { snapshot } from '@faber/core'
import { isMain, row, timeOp } from './harness.ts'

const shapes: [string, unknown, number][] = [
  ['arguments { a, b }', { a: 1, b: 2 }, 50000],
  ['arguments { path, text, options: [...] }', { path: 'src/index.ts', text: 'export {}\n', options: { create: true, tags: ['a', 'b', 'c'] } }, 50000],
  ['a result of 1,000 records', Array.from({ length: 1000 }, (_, i) => ({ name: `file-${i}.ts`, size: i * 31, dir: false })), 200],
  ['200 levels deep', Array.from({ length: 200 }).reduce((inner) => ({ x: inner }), 0), 5000],
]

export async function benchJson() {
  console.log('json: snapshot of a value as lossless, frozen JSON')
  const figures: Record<string, { snapshotUs: number; roundTripUs: number }> = {}
  for (const [label, value, iterations] of shapes) {
    const roundTrip = await timeOp(() => JSON.parse(JSON.stringify(value)), iterations)
    const copy = await timeOp(() => snapshot(value), iterations)
    row(`${label}: stringify + parse`, roundTrip, roundTrip)
    row(`${label}: snapshot`, copy, roundTrip)
    figures[label] = { snapshotUs: copy, roundTripUs: roundTrip }
  }
  return figures
}

if (isMain(import.meta.url)) await benchJson()
