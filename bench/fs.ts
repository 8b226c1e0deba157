// grep and glob of @faber/plugin-tools-fs over a few thousand files, through the whole pipeline, as ratios
// against a plain recursive readdir (for glob) and readdir + readFile of every file (for grep) in the same run

import { mkdir, mkdtemp, readdir, readFile, realpath, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import ToolRuntime from '@faber/core'
import * as ToolsFs from '@faber/plugin-tools-fs'
import { Context, Logger } from 'cordis'

const FILES = 3000
const PER_DIR = 30

async function makeTree(root: string) {
  for (let i = 0; i < FILES; i++) {
    const dir = path.join(root, `pkg${Math.floor(i / (PER_DIR * 10))}`, `mod${Math.floor(i / PER_DIR) % 10}`)
    if (i % PER_DIR === 0) await mkdir(dir, { recursive: true })
    const lines = Array.from({ length: 60 }, (_, n) => `export const value${n} = ${i * n} // line ${n} of file ${i}`)
    if (i % 100 === 7) lines[30] = '// TODO: rare marker'
    await writeFile(path.join(dir, `file${i}.${i % 3 ? 'ts' : 'md'}`), `${lines.join('\n')}\n`)
  }
}

async function plainWalk(dir: string, read: boolean, out: string[]) {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) await plainWalk(full, read, out)
    else if (read) out.push(await readFile(full, 'utf8'))
    else out.push(full)
  }
  return out
}

/** the same reads, 32 at a time (the concurrency grep uses) */
async function parallelRead(root: string) {
  const files = await plainWalk(root, false, [])
  let next = 0
  const worker = async () => {
    while (next < files.length) await readFile(files[next++], 'utf8')
  }
  await Promise.all(Array.from({ length: 32 }, worker))
}

const median = (values: number[]) => values.sort((x, y) => x - y)[Math.floor(values.length / 2)]

async function time(fn: () => Promise<unknown>) {
  const start = performance.now()
  await fn()
  return performance.now() - start
}

/**
 * the subject and its baseline alternate run by run (this machine is shared and noisy), after one warm-up each;
 * the ratio is the median of the per-run ratios
 */
async function compare(subject: () => Promise<unknown>, baseline: () => Promise<unknown>, runs = 11) {
  await baseline()
  await subject()
  const ms: number[] = []
  const base: number[] = []
  const ratios: number[] = []
  for (let i = 0; i < runs; i++) {
    const b = await time(baseline)
    const m = await time(subject)
    base.push(b)
    ms.push(m)
    ratios.push(m / b)
  }
  return { ms: median(ms), baseline: median(base), ratio: median(ratios) }
}

export async function benchFs(): Promise<Record<string, number>> {
  Logger.levels.base = 0
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'faber-bench-fs-')))
  const ctx = new Context()
  try {
    await makeTree(root)
    ctx.plugin(ToolRuntime, { mode: 'native' })
    ctx.plugin(ToolsFs, { root })
    await ctx.start()
    let n = 0
    const call = async (name: string, args: object) => {
      const result = await ctx.tools.execute({ callId: `b${++n}`, name, arguments: args, signal: new AbortController().signal })
      if (result.isError) throw new Error(result.content)
      return result.value
    }
    const walk = () => plainWalk(root, false, [])
    const readAll = () => parallelRead(root)
    const serial = await compare(readAll, () => plainWalk(root, true, []), 5)
    const results: Record<string, number> = {
      'fs.files': FILES,
      'fs.baseline.readdir+readFile.serial.ms': serial.baseline,
      'fs.baseline.readdir+readFile.parallel.ms': serial.ms,
    }
    const cases: [string, string, object, () => Promise<unknown>][] = [
      ['glob.name', 'glob', { pattern: '*.ts' }, walk],
      ['glob.path', 'glob', { pattern: 'pkg1/**/*.md' }, walk],
      ['grep.rare', 'grep', { pattern: 'TODO: rare' }, readAll],
      ['grep.common.capped', 'grep', { pattern: 'value1\\d = ', limit: 200 }, readAll],
      ['grep.rare.glob', 'grep', { pattern: 'TODO', glob: '*.md' }, readAll],
    ]
    for (const [label, tool, args, baseline] of cases) {
      const figures = await compare(() => call(tool, args), baseline)
      results[`fs.${label}.ms`] = figures.ms
      results[`fs.${label}.baseline.ms`] = figures.baseline
      results[`fs.${label}.ratio`] = figures.ratio
    }
    return results
  } finally {
    await ctx.stop()
    await rm(root, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const r = await benchFs()
  const ms = (key: string) => `${r[key].toFixed(1)} ms`
  console.log(
    `${r['fs.files']} files; reading them all: ${ms('fs.baseline.readdir+readFile.serial.ms')} one at a time, ${ms('fs.baseline.readdir+readFile.parallel.ms')} 32 at a time`,
  )
  for (const label of ['glob.name', 'glob.path', 'grep.rare', 'grep.common.capped', 'grep.rare.glob']) {
    const against = label.startsWith('glob') ? 'recursive readdir' : 'readdir + readFile, 32 at a time'
    console.log(`${label.padEnd(20)} ${ms(`fs.${label}.ms`).padStart(9)}  ${r[`fs.${label}.ratio`].toFixed(2)}x ${against} (${ms(`fs.${label}.baseline.ms`)})`)
  }
}
