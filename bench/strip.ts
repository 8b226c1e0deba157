// the type stripper run_code uses (packages/core/src/strip.ts): @swc/wasm-typescript in strip-only mode, against
// amaro (node's own stripper, which wraps the same swc build but declares node >= 22: the baseline) and
// ts-blank-space (pure JavaScript on TypeScript's parser). per program, warm; then a fresh process's import and first
// program, which a deployment's first run_code pays (median of 5 processes).

import { execFileSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { transformSync as swc } from '@swc/wasm-typescript'
import { transformSync as amaro } from 'amaro'
import blank from 'ts-blank-space'
import { isMain, median, row, timeOp } from './harness.ts'

const require = createRequire(import.meta.url)

const HEAD = 'async function __faber_program(tools, console) {'
const TYPED = [
  "const files: string[] = (await tools.glob({ pattern: 'src/**/*.ts' })).paths",
  'const sizes = new Map<string, number>()',
  'for (const path of files) {',
  '  const { totalLines } = (await tools.read({ path })) as { totalLines: number }',
  '  sizes.set(path, totalLines)',
  '}',
  'const largest = [...sizes].sort((a: [string, number], b: [string, number]) => b[1] - a[1]).slice(0, 3)',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the program's own template literal, as text
  'return largest.map(([path, lines]): string => `${path}: ${lines}`)',
].join('\n')
const programs: [string, string, number][] = [
  ['a 3-line program', "const r: { text: string } = await tools.read({ path: 'a' })\nconsole.log(r.text as string)\nreturn r.text.length", 2000],
  ['an 8-line typed program', TYPED, 1000],
  ['a 400-line typed program', Array.from({ length: 50 }, () => TYPED).join('\n'), 50],
]

const strippers: [string, (source: string) => string][] = [
  ['amaro 1.2.1', (source) => amaro(source, { mode: 'strip-only' }).code],
  ['@swc/wasm-typescript 1.16.2', (source) => swc(source, { mode: 'strip-only' }).code],
  ['ts-blank-space 0.9.0', (source) => blank(source)],
]

/** ms from a fresh node's start to the first program stripped, `module` imported (median of 5 processes) */
function firstProgram(module: string, call: string): number {
  const script = `const t = performance.now(); const m = await import(${JSON.stringify(require.resolve(module))}); ${call}; console.log(performance.now() - t)`
  const runs = Array.from({ length: 5 }, () => Number(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })))
  return median(runs)
}

export async function benchStrip() {
  console.log('strip: type stripping of a run_code program (lines and columns kept)')
  const figures: Record<string, Record<string, number>> = {}
  for (const [label, source, iterations] of programs) {
    const wrapped = `${HEAD}\n${source}\n}`
    const lines = strippers.map(([, strip]) => strip(wrapped).split('\n').length)
    if (new Set(lines).size !== 1) throw new Error(`the strippers disagree on the lines of ${label}: ${lines.join(', ')}`)
    let baseline = 0
    for (const [name, strip] of strippers) {
      const us = await timeOp(() => strip(wrapped), iterations)
      baseline ||= us
      row(`${label}: ${name}`, us, baseline)
      figures[label] = { ...figures[label], [name]: us }
    }
  }
  const program = JSON.stringify(`${HEAD}\n${TYPED}\n}`)
  const first = {
    'amaro 1.2.1': firstProgram('amaro', `m.transformSync(${program}, { mode: 'strip-only' })`),
    '@swc/wasm-typescript 1.16.2': firstProgram('@swc/wasm-typescript', `m.transformSync(${program}, { mode: 'strip-only' })`),
    'ts-blank-space 0.9.0': firstProgram('ts-blank-space', `m.default(${program})`),
  }
  for (const [name, ms] of Object.entries(first)) row(`import + first program: ${name}`, ms * 1000, first['amaro 1.2.1'] * 1000)
  figures['import + first program (ms)'] = first
  return figures
}

if (isMain(import.meta.url)) await benchStrip()
