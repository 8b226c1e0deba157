// `pnpm bench mix`: a realistic mix of run_code programs on every backend and tier, in one run, each pair in fresh
// processes of its own (bench/_mix.ts), through core's full run_code pipeline:
// - the first run_code of a fresh process (the demo's program), from the deployment's start and from the process's;
// - then, warm, the median of 10 runs of each: `return 1`, the demo's program (3 reads at once, 4 edits and a write), 20
//   and 1,000 sequential nested calls, a 1,000-call Promise.all, a 1 MB JSON transform (10,000 rows in, filtered and
//   mapped); and once, 100,000 calls under Promise.all with the default limits;
// - per run, the host process's wall ms and cpu ms (all its threads; on the process tier the sandbox process's cpu is not
//   in it), and the host's RSS after each workload.
// then the same figures per call beside the seed's reference (constants: see REFERENCE), the floors a process boundary
// sets (an ipc round trip between two node processes, json and advanced serialization), and the first run_code from the
// packed packages on plain node (the tarballs installed with npm in a temporary project; MIX_PACKED=0 leaves it out).
// MIX_ROUNDS (default 1) repeats the lot, pairs alternating, and keeps the median of each figure

import { execFile, execFileSync, fork } from 'node:child_process'
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DEMO_FILES, DEMO_PROGRAM } from '../packages/cli/src/demo.ts'
import { isMain, median } from './harness.ts'

const child = fileURLToPath(new URL('./_mix.ts', import.meta.url))
const root = fileURLToPath(new URL('..', import.meta.url))
const pairs = ['worker', 'isolate', 'quickjs'].flatMap((backend) => ['in-process', 'process'].map((isolation) => [backend, isolation]))
const workloads = ['demo', 'sequential20', 'all1000', 'json1MB'] as const
type Cell = { ms: number; cpuMs: number; rssMb: number }
type Figures = Record<string, number> &
  Record<(typeof workloads)[number] | 'return1' | 'sequential1000', Cell> & { all100k: { ms: number; ok: boolean; error?: string } }

// the seed's reference, as issue #29 measured it on this kind of machine (its built bundles on Node 22, medians of 3
// interleaved processes, load ~1). its bundles are not on this machine, so these are constants, not measured in this run
const REFERENCE = { firstMs: 101, warmMs: 64, sequentialUs: 225, allUs: 165 }

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

/** µs per round trip of a small message between this process and another node process over the ipc channel */
async function ipcRoundTrip(serialization: 'json' | 'advanced', trips = 2000) {
  const echo = fork(fileURLToPath(new URL('./_ipc-echo.mjs', import.meta.url)), [], { serialization, env: {} })
  const message = [7, 'call', 12, 'echo', '{"i":12}', 2097165]
  const trip = () =>
    new Promise((resolve) => {
      echo.once('message', resolve)
      echo.send(message)
    })
  const times: number[] = []
  for (let round = 0; round < 5; round++) {
    const from = performance.now()
    for (let i = 0; i < trips; i++) await trip()
    times.push(((performance.now() - from) * 1000) / trips)
  }
  echo.disconnect()
  return median(times)
}

/** the first run_code right after start, from the packed core and sandbox installed with npm, on plain node */
function packedFirstRuns(rounds: number) {
  const dir = mkdtempSync(join(tmpdir(), 'faber-mix-'))
  try {
    const tarballs = join(dir, 'tarballs')
    execFileSync('pnpm', ['tarballs', tarballs], { cwd: root, stdio: 'ignore' })
    const packed = readdirSync(tarballs).filter((file) => /^faber-(core|sandbox)-\d/.test(file))
    const project = join(dir, 'project')
    mkdirSync(project)
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'mix', private: true, type: 'module' }))
    // what a user's shell has: none of pnpm's npm_* settings
    const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^npm_/i.test(key)))
    execFileSync('npm', ['install', '--no-audit', '--no-fund', ...packed.map((file) => join(tarballs, file))], { cwd: project, env, stdio: 'ignore' })
    copyFileSync(fileURLToPath(new URL('./_mix-packed.mjs', import.meta.url)), join(project, 'first.mjs'))
    const runs: Record<string, { firstMs: number; firstFromStartMs: number }[]> = { 'in-process': [], process: [] }
    for (let round = 0; round < rounds; round++)
      for (const isolation of Object.keys(runs))
        runs[isolation].push(JSON.parse(execFileSync(process.execPath, ['first.mjs', isolation], { cwd: project, env, encoding: 'utf8' }).trim()))
    return runs
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

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

  const floors = { json: await ipcRoundTrip('json'), advanced: await ipcRoundTrip('advanced') }
  const packed = process.env.MIX_PACKED === '0' ? undefined : packedFirstRuns(rounds)
  const perCall = (runs: Figures[], workload: 'sequential1000' | 'all1000') => of(runs, (f) => ((f[workload].ms - f.return1.ms) * 1000) / 1000)
  console.log('\n  beside the reference (constants from #29; × = how many times faster than it, < 1 slower)')
  const head = ['first run', 'first, packed', 'warm return 1', 'sequential call', 'call under all', '100,000 under all']
  console.log(`  ${''.padEnd(20)} ${head.map((h) => h.padStart(17)).join(' ')}`)
  const x = (reference: number, value: number) => `${(reference / value).toFixed(1)}×`
  const ref = REFERENCE
  console.log(
    `  ${'reference'.padEnd(20)} ${[`${ref.firstMs} ms`, `${ref.firstMs} ms`, `${ref.warmMs} ms`, `${ref.sequentialUs} µs`, `${ref.allUs} µs`, '—'].map((c) => c.padStart(17)).join(' ')}`,
  )
  for (const [key, runs] of seen) {
    const first = of(runs, (f) => f.firstMs)
    const packedRuns = key.startsWith('worker ') ? packed?.[key.slice('worker '.length)] : undefined
    const packedFirst = packedRuns ? median(packedRuns.map((r) => r.firstMs)) : undefined
    const warm = of(runs, (f) => f.return1.ms)
    const sequential = perCall(runs, 'sequential1000')
    const all = perCall(runs, 'all1000')
    const fan = runs.at(-1)!.all100k
    const cells = [
      `${fixed(first)} ms ${x(ref.firstMs, first)}`,
      packedFirst === undefined ? '—' : `${fixed(packedFirst)} ms ${x(ref.firstMs, packedFirst)}`,
      `${fixed(warm)} ms ${x(ref.warmMs, warm)}`,
      `${fixed(sequential)} µs ${x(ref.sequentialUs, sequential)}`,
      `${fixed(all)} µs ${x(ref.allUs, all)}`,
      fan.ok ? `${(fan.ms / 1000).toFixed(1)} s ok` : `failed (${fan.error?.slice(0, 30)})`,
    ]
    console.log(`  ${key.padEnd(20)} ${cells.map((c) => c.padStart(17)).join(' ')}`)
  }
  console.log('  targets for the default: first run ≤ 1× (workspace and packed), warm ≥ 20×, sequential call ≥ 5×, 100,000 within cpuMs 5000')
  console.log(`  floor, an ipc round trip between two node processes: ${fixed(floors.json)} µs (json), ${fixed(floors.advanced)} µs (advanced serialization)`)
  return { table, floors, packed }
}

if (isMain(import.meta.url)) await benchMix()
