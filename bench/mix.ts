// `pnpm bench mix`: a realistic mix of run_code programs on every backend and tier, in one run, each pair in fresh
// processes of its own (bench/_mix.ts), through core's full run_code pipeline:
// - the first run_code of a fresh process (the demo's program), from the deployment's start and from the process's;
// - then, warm, the median of 10 runs of each: the demo's program (3 reads at once, 4 edits and a write), 20 sequential
//   nested calls, a 1,000-call Promise.all, a 1 MB JSON transform (10,000 rows in, filtered and mapped);
// - per run, the host process's wall ms and cpu ms (all its threads; on the process tier the sandbox process's cpu is not
//   in it), and the host's RSS after each workload.
// MIX_ROUNDS (default 1) repeats the lot, pairs alternating, and keeps the median of each figure

import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { DEMO_FILES, DEMO_PROGRAM } from '../packages/cli/src/demo.ts'
import { isMain, median } from './harness.ts'

const child = fileURLToPath(new URL('./_mix.ts', import.meta.url))
const pairs = ['worker', 'isolate', 'quickjs'].flatMap((backend) => ['in-process', 'process'].map((isolation) => [backend, isolation]))
const workloads = ['demo', 'sequential20', 'all1000', 'json1MB'] as const
type Figures = Record<string, number> & Record<(typeof workloads)[number], { ms: number; cpuMs: number; rssMb: number }>

const once = (backend: string, isolation: string) =>
  new Promise<Figures>((resolve, reject) =>
    execFile(
      process.execPath,
      ['--no-node-snapshot', '--import', 'tsx/esm', child, backend, isolation],
      { env: { ...process.env, MIX_PROGRAM: DEMO_PROGRAM, MIX_FILES: JSON.stringify(DEMO_FILES) }, maxBuffer: 1 << 20 },
      (error, stdout, stderr) =>
        error ? reject(new Error(`${backend} ${isolation}: ${stderr.slice(-500)}`)) : resolve(JSON.parse(stdout.trim().split('\n').at(-1)!)),
    ),
  )

export async function benchMix() {
  const rounds = Number(process.env.MIX_ROUNDS ?? 1)
  const seen = new Map<string, Figures[]>()
  for (let round = 0; round < rounds; round++) {
    for (const [backend, isolation] of round % 2 ? [...pairs].reverse() : pairs) {
      const key = `${backend} ${isolation}`
      seen.set(key, [...(seen.get(key) ?? []), await once(backend, isolation)])
    }
  }
  const of = (runs: Figures[], pick: (f: Figures) => number) => median(runs.map(pick))
  const fixed = (value: number) => (value >= 100 ? value.toFixed(0) : value.toFixed(1))
  console.log(`  ms wall / host cpu ms per run (median of 10 warm runs${rounds > 1 ? `, median of ${rounds} rounds` : ''}); first run in a fresh process`)
  console.log(
    `  ${'backend, tier'.padEnd(20)} ${'first (from start)'.padStart(20)} ${workloads.map((w) => w.padStart(14)).join(' ')} ${'host RSS'.padStart(9)}`,
  )
  const table: Record<string, unknown> = {}
  for (const [key, runs] of seen) {
    const first = `${fixed(of(runs, (f) => f.firstMs))} (${fixed(of(runs, (f) => f.firstFromStartMs))})`
    const cells = workloads.map((w) => `${fixed(of(runs, (f) => f[w].ms))}/${fixed(of(runs, (f) => f[w].cpuMs))}`)
    const rss = `${of(runs, (f) => Math.max(...workloads.map((w) => f[w].rssMb)))} MB`
    console.log(`  ${key.padEnd(20)} ${first.padStart(20)} ${cells.map((c) => c.padStart(14)).join(' ')} ${rss.padStart(9)}`)
    table[key] = runs
  }
  return table
}

if (isMain(import.meta.url)) await benchMix()
