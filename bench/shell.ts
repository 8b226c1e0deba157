// what one `bash` call of @faber/plugin-tools-shell costs through the whole pipeline, unconfined and inside
// bubblewrap, as ratios against a bare `bash -c` spawned from node in the same run (`pnpm bench shell`)

import { spawn } from 'node:child_process'
import { mkdtemp, realpath, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import ToolRuntime, { assertStarted } from '@faber/core'
import * as ToolsShell from '@faber/plugin-tools-shell'
import { Context, Logger } from 'cordis'

const RUNS = 21
const COMMAND = 'echo hello; seq 1 1000 > /dev/null'

const median = (values: number[]) => values.sort((x, y) => x - y)[Math.floor(values.length / 2)]

function bare(cwd: string) {
  return new Promise<void>((resolve, reject) => {
    const child = spawn('/bin/bash', ['-c', COMMAND], { cwd, stdio: ['ignore', 'pipe', 'pipe'] })
    child.stdout.resume()
    child.stderr.resume()
    child.on('error', reject)
    child.on('close', () => resolve())
  })
}

async function deployment(root: string, confine: boolean) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  ctx.plugin(ToolsShell, { root, confine })
  await ctx.start()
  await assertStarted(ctx)
  let n = 0
  const call = async () => {
    const result = await ctx.tools.execute({ callId: `b${++n}`, name: 'bash', arguments: { command: COMMAND }, signal: new AbortController().signal })
    if (result.isError) throw new Error(result.content)
  }
  return { ctx, call }
}

export async function benchShell(): Promise<Record<string, number | string>> {
  Logger.levels.base = 0
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'faber-bench-shell-')))
  const open: Context[] = []
  try {
    const subjects: [string, () => Promise<void>][] = []
    const unconfined = await deployment(root, false)
    open.push(unconfined.ctx)
    subjects.push(['unconfined', unconfined.call])
    let confinedNote = 'measured'
    try {
      const confined = await deployment(root, true)
      open.push(confined.ctx)
      subjects.push(['bubblewrap', confined.call])
    } catch (error) {
      confinedNote = `not measured: ${(error as Error).message}`
    }
    const base: number[] = []
    const ms: Record<string, number[]> = {}
    const ratios: Record<string, number[]> = {}
    // one warm-up each, then the baseline and the subjects alternate run by run (a shared, noisy machine)
    await bare(root)
    for (const [, call] of subjects) await call()
    for (let i = 0; i < RUNS; i++) {
      const start = performance.now()
      await bare(root)
      const b = performance.now() - start
      base.push(b)
      for (const [label, call] of subjects) {
        const t0 = performance.now()
        await call()
        const t = performance.now() - t0
        ;(ms[label] ??= []).push(t)
        ;(ratios[label] ??= []).push(t / b)
      }
    }
    const results: Record<string, number | string> = { 'shell.bare.ms': median(base), 'shell.bubblewrap': confinedNote }
    for (const [label] of subjects) {
      results[`shell.${label}.ms`] = median(ms[label])
      results[`shell.${label}.ratio`] = median(ratios[label])
    }
    return results
  } finally {
    for (const ctx of open) await ctx.stop()
    await rm(root, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const r = await benchShell()
  const line = (label: string) =>
    typeof r[`shell.${label}.ms`] === 'number'
      ? `${label}: ${(r[`shell.${label}.ms`] as number).toFixed(1)} ms, ${(r[`shell.${label}.ratio`] as number).toFixed(2)}× a bare spawn`
      : `${label}: ${r['shell.bubblewrap']}`
  console.log(`a bare bash -c from node: ${(r['shell.bare.ms'] as number).toFixed(1)} ms (median of ${RUNS})`)
  console.log(line('unconfined'))
  console.log(line('bubblewrap'))
}
