// nested calls against the physical floors, all measured in this process and this run (issue 15): a worker_threads
// postMessage round trip, a SharedArrayBuffer hand-off with the waiting side spinning, an isolated-vm applySync, an
// in-process vm program awaiting an async host function, and a fresh isolate context's own await loop (the cold code
// every run starts with). against them: the worker's own side of a call (this thread a host that spins and answers at
// once) and the isolate's (answered inside the isolate, no other thread), each backend and tier with the host answering
// at once (the sandbox alone), the full run_code stack, the bridge's own cost (full stack minus sandbox alone), the
// context setup and the first run after start against a warm one (each in a fresh process: bench/_first-run.ts), plain
// `ctx.tools.execute` against a held reference, and the CPU time per call.
// `pnpm bench nested`; NESTED_ONLY=isolate (a part of a row's label) measures only those backends and tiers,
// NESTED_FIRST_RUNS=5 the first run in five fresh processes per tier (default 3), NESTED_PART=first only the context
// setup and first-run rows, NESTED_PART=bridge only the bridge's own cost rows, NESTED_PART=execute only plain
// ctx.tools.execute against a held reference

import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { runInNewContext } from 'node:vm'
import { MessageChannel, receiveMessageOnPort, Worker } from 'node:worker_threads'
import ToolRuntime, { type CodeRunLimits, type CodeRuntime } from '@faber/core'
import WorkerSandboxService, { type CodeRunRequest, ProcessSandbox, WorkerSandbox, workerBackend } from '@faber/sandbox'
import IsolateSandboxService, { IsolateSandbox, isolateBackend } from '@faber/sandbox-isolate'
import { Context, Logger, Service } from 'cordis'
import { RunBridge } from '../packages/sandbox/src/bridge.ts'
import { handoffBytes, lane } from '../packages/sandbox/src/lane.mjs'
import { callsSource, preludeSource, workerTexts, wrapProgram } from '../packages/sandbox/src/prelude.mjs'
import { isMain, median, nopTool, row, timeOp } from './harness.ts'

Logger.levels.base = 0

// isolated-vm is the isolate backend's dependency, not the workspace root's
interface Reference {
  applySync(receiver: undefined, args: unknown[], options?: { result: { reference: true } }): unknown
  apply(receiver: undefined, args: unknown[], options: { result: { promise: true } }): Promise<unknown>
  getSync(name: string, options: { reference: true }): Reference
  derefInto(): unknown
}
interface IsolateContext {
  evalSync(code: string, options: { reference: true }): Reference
  release(): void
}
interface Isolate {
  createContextSync(): IsolateContext
  compileScriptSync(
    code: string,
    options?: { filename?: string; lineOffset?: number },
  ): {
    runSync(context: IsolateContext, options: { reference: true }): Reference
    run(context: IsolateContext, options: { reference: true }): Promise<Reference>
  }
  dispose(): void
}
const ivm: { Isolate: new (options: { memoryLimit: number }) => Isolate } = createRequire(new URL('../packages/sandbox-isolate/package.json', import.meta.url))(
  'isolated-vm',
)

const N = 2000
const only = process.env.NESTED_ONLY ?? ''
const limits: CodeRunLimits = { cpuMs: 5000, wallMs: 30000, memoryMb: 64, outputBytes: 64 * 1024 }
const sequential = `for (let i = 0; i < ${N}; i++) await tools.echo({ i })`
// 1000 calls at once: all of them wait on the host (past 1024 the rest wait in the sandbox)
const P = 1000
const parallel = `await Promise.all(Array.from({ length: ${P} }, (_, i) => tools.echo({ i })))`

interface Closable extends CodeRuntime {
  close(): Promise<void>
}

async function postMessageFloor() {
  const worker = new Worker("require('node:worker_threads').parentPort.on('message', (m) => require('node:worker_threads').parentPort.postMessage(m))", {
    eval: true,
  })
  const once = () => new Promise((resolve) => worker.once('message', resolve))
  const rtt = await timeOp(() => {
    const reply = once()
    worker.postMessage(1)
    return reply
  }, 5000)
  await worker.terminate()
  return rtt
}

// both sides spin on a shared counter: the cost of a hand-off when neither sleeps
async function spinFloor() {
  const shared = new Int32Array(new SharedArrayBuffer(8))
  const worker = new Worker(
    `const { workerData } = require('node:worker_threads'); const s = workerData
     for (let seen = 0; ; ) { let v; while ((v = Atomics.load(s, 0)) === seen) {} if (v < 0) break; seen = v + 1; Atomics.store(s, 0, seen) }`,
    { eval: true, workerData: shared },
  )
  let value = 0
  const rtt = await timeOp(() => {
    Atomics.store(shared, 0, ++value)
    while (Atomics.load(shared, 0) === value) {}
    value++
  }, 20000)
  Atomics.store(shared, 0, -1)
  await worker.terminate()
  return rtt
}

async function applySyncFloor() {
  const isolate = new ivm.Isolate({ memoryLimit: 32 })
  const context = isolate.createContextSync()
  const nop = context.evalSync('(function (a) { return a })', { reference: true })
  const micros = await timeOp(() => nop.applySync(undefined, [1]), 20000)
  isolate.dispose()
  return micros
}

async function vmFloor() {
  const host = async (json: string) => json
  const program = runInNewContext(`(async function (call, n) { for (let i = 0; i < n; i++) await call('{"i":' + i + '}') })`)
  return (await timeOp(() => program(host, N), 3, 5)) / N
}

// the isolate's own cold-code floor: each run a fresh context (as every run_code gets), a loop of N awaits of a promise
// that a microtask settles with the JSON round trip of the argument. no prelude, no host, no other thread: what V8 takes
// for the program's side of a sequential call in code that starts cold in each run. the median of 15 runs, after 3
async function freshContextFloor() {
  const isolate = new ivm.Isolate({ memoryLimit: 64 })
  const loop = `(async () => {
    const call = (i) => new Promise((resolve) => Promise.resolve().then(() => resolve(JSON.parse(JSON.stringify({ i })))))
    for (let i = 0; i < ${N}; i++) await call(i)
  })`
  const times: number[] = []
  for (let i = 0; i < 18; i++) {
    const context = isolate.createContextSync()
    const run = context.evalSync(loop, { reference: true })
    const started = performance.now()
    await run.apply(undefined, [], { result: { promise: true } })
    if (i >= 3) times.push(((performance.now() - started) * 1000) / N)
    context.release()
  }
  isolate.dispose()
  return median(times)
}

// the isolate's side of a sequential call, alone: the sandbox's prelude in a fresh context per run, with the flatJson and
// makeCalls its driver makes once per isolate, and a host inside the isolate that answers each call in a microtask (no
// hand-off, no other thread). what the program, the prelude and the calls' slots cost per call, which the in-process
// sandbox adds the hand-off and the host's side to. per call beyond a trivial run; the median of 15 runs, after 3
async function isolateSideAlone() {
  const isolate = new ivm.Isolate({ memoryLimit: 128 })
  const prelude = isolate.compileScriptSync(preludeSource, { filename: 'faber-prelude.js' })
  const own = isolate.createContextSync()
  const shared = isolate.compileScriptSync(callsSource, { filename: 'faber-calls.js' }).runSync(own, { reference: true })
  const driver = isolate
    .compileScriptSync(`((shared) => function (setup, toolNamesJson, ...rest) {
      let ended
      const end = new Promise((resolve) => { ended = resolve })
      const settled = Promise.resolve()
      let api
      api = setup((kind, a, b, c) => {
        if (kind === 'call') settled.then(() => api.deliver(a, true, c))
        else if (kind === 'done' || kind === 'throw') ended(kind === 'done' ? 'done' : String(a))
        return true
      }, toolNamesJson, ...rest, shared)
      return { begin: (main) => { api.start(main); return end } }
    })`)
    .runSync(own, { reference: true })
    .applySync(undefined, [shared.derefInto()], { result: { reference: true } }) as Reference
  const once = async (code: string) => {
    const context = isolate.createContextSync()
    const setup = prelude.runSync(context, { reference: true })
    const source = wrapProgram(code)
    const api = driver.applySync(undefined, [setup.derefInto(), '["echo"]', 65536, 64 << 20, 1 << 20, 1024], {
      result: { reference: true },
    }) as Reference
    const begin = api.getSync('begin', { reference: true })
    const main = await isolate.compileScriptSync(source, { filename: 'program.js', lineOffset: -1 }).run(context, { reference: true })
    const started = performance.now()
    const outcome = await begin.apply(undefined, [main.derefInto()], { result: { promise: true } })
    const elapsed = performance.now() - started
    context.release()
    if (outcome !== 'done') throw new Error(`the isolate's side alone: ${outcome}`)
    return elapsed * 1000
  }
  const trivial: number[] = []
  const calls: number[] = []
  for (let i = 0; i < 18; i++) {
    trivial.push(await once('return 1'))
    calls.push(await once(sequential))
  }
  isolate.dispose()
  return Math.max(0, median(calls.slice(3)) - median(trivial.slice(3))) / N
}

// the worker's own side of a sequential call: the sandbox's worker (worker.mjs, its prelude and lanes) running the
// sequential program, with this thread as a host that does nothing else: it spins on the lane for each call and answers
// it at once, through the ring while the worker spins for it (no event loop, no bridge, no tool on this side). what
// the sandbox's side costs per call (the program, the prelude, the worker's bridge, the lanes, the hop to its spin),
// which the full sandbox adds the host's side to. the best of 5 runs, after 2
async function workerSideAlone() {
  const calls = N
  const active = new Int32Array(new SharedArrayBuffer(4))
  const handoff = new SharedArrayBuffer(handoffBytes)
  const { port1: repliesPort, port2: repliesEnd } = new MessageChannel()
  const { port1: inboxPort, port2: toHost } = new MessageChannel()
  const worker = new Worker(new URL('../packages/sandbox/src/worker.mjs', import.meta.url), {
    execArgv: ['--experimental-vm-modules'],
    workerData: { ...workerTexts, replies: repliesEnd, toHost, handoff, active, spinMs: 0.05 },
    transferList: [repliesEnd, toHost],
  })
  await new Promise((resolve) => worker.once('message', resolve))
  const replies = lane(handoff, 1, repliesPort)
  const inbox = lane(handoff, 0, inboxPort)
  let id = 0
  const once = () => {
    const run = ++id
    const source = `(async function (tools, console) {\nfor (let i = 0; i < ${calls}; i++) await tools.echo({ i })\n})`
    Atomics.store(active, 0, 1)
    worker.postMessage({
      id: run,
      source,
      tools: ['echo'],
      outputBytes: 65536,
      bufferBytes: 64 << 20,
      argumentBytes: 16 << 20,
      maxPendingCalls: 1024,
    })
    let outcome: { t: string; message?: string } | undefined
    // a call: `id:call:site:name length:name json`; the reply `id:call:json`
    const onMessage = (message: unknown) => {
      // anything but a call is the run's end, as the worker reports it (contract.ts): `[run id, kind, a, ...]`
      if (typeof message !== 'string') {
        const [, kind, detail] = message as unknown[]
        return void (outcome = { t: String(kind), message: String(detail) })
      }
      const first = message.indexOf(':')
      const second = message.indexOf(':', first + 1)
      const third = message.indexOf(':', second + 1)
      const fourth = message.indexOf(':', third + 1)
      const end = fourth + 1 + Number(message.slice(third + 1, fourth))
      inbox.watch()
      replies.send(`${run}:${message.slice(first + 1, second)}:${message.slice(end)}`)
    }
    const started = performance.now()
    inbox.watch()
    while (outcome === undefined) {
      if (inbox.spin(1)) inbox.take(onMessage)
      else {
        const next = receiveMessageOnPort(inboxPort)
        if (next !== undefined) inbox.port(next.message, onMessage)
        if (performance.now() - started > 60_000) throw new Error('the worker did not finish its run')
      }
    }
    inbox.unwatch()
    if (outcome.t !== 'done') throw new Error(`${outcome.t}: ${outcome.message}`)
    return ((performance.now() - started) * 1000) / calls
  }
  const times: number[] = []
  for (let i = 0; i < 7; i++) times.push(once())
  await worker.terminate()
  return Math.min(...times.slice(2))
}

const echo = async (_: string, json: string) => ({ ok: true as const, value: json })
const slowEcho = async (_: string, json: string) => {
  await new Promise((resolve) => setTimeout(resolve, 1))
  return { ok: true as const, value: json }
}

// CPU (all threads of this process) per call of a sequential program of `calls` calls, the median of five runs
async function cpuPerCallOf(runtime: CodeRuntime, code: string, calls: number, call: typeof echo) {
  const samples: number[] = []
  for (let i = 0; i < 5; i++) {
    const cpuStart = process.cpuUsage()
    const outcome = await runtime.run({ code, tools: ['echo'], call, signal: new AbortController().signal, limits })
    if (!outcome.ok) throw new Error(`${outcome.kind}: ${outcome.message}`)
    const cpu = process.cpuUsage(cpuStart)
    samples.push((cpu.user + cpu.system) / calls)
  }
  return median(samples)
}

// per call to a tool that takes 1 ms: what waiting costs when replies are slow
const cpuWhenSlow = (runtime: CodeRuntime) => cpuPerCallOf(runtime, 'for (let i = 0; i < 100; i++) await tools.echo({ i })', 100, slowEcho)

// per call of a program that computes ~0.1 ms between its calls, the host answering at once: what the hand-off's
// spinning costs when calls do not come back quickly
const cpuWhenComputing = (runtime: CodeRuntime) =>
  cpuPerCallOf(runtime, 'let x = 0\nfor (let i = 0; i < 200; i++) { for (let j = 0; j < 1e5; j++) x += j; await tools.echo({ i }) }', 200, echo)

// per nested call of `code`, beyond a trivial run on the same sandbox
async function perCall(runtime: CodeRuntime, code: string, calls: number, iterations = 3) {
  const signal = new AbortController().signal
  const run = async (program: string) => {
    const outcome = await runtime.run({ code: program, tools: ['echo'], call: echo, signal, limits })
    if (!outcome.ok) throw new Error(`${outcome.kind}: ${outcome.message}`)
  }
  const trivial = await timeOp(() => run('return 1'), 50, 3)
  // each run's own time too: the figure above is the fastest round's, which a shared machine's bad spells miss; the
  // spread of single runs says what a program typically waits
  const runs: number[] = []
  const timed = async () => {
    const started = performance.now()
    await run(code)
    runs.push((performance.now() - started) * 1000)
  }
  const cpuStart = process.cpuUsage()
  const total = await timeOp(timed, iterations, 3)
  const cpu = process.cpuUsage(cpuStart)
  // every round and warm-up ran the program: `iterations` warm-ups + 3 rounds of `iterations` runs
  const cpuPerCall = (cpu.user + cpu.system) / (4 * iterations * calls)
  const spread = quartiles(runs.slice(iterations).map((us) => Math.max(0, us - trivial) / calls))
  return { micros: Math.max(0, total - trivial) / calls, cpuPerCall, spread }
}

const sandboxes: [string, () => Closable][] = [
  ['worker, in-process', () => new WorkerSandbox({ limits })],
  ['worker, in-process, hand-off never spinning (spinMs 0)', () => new WorkerSandbox({ limits, spinMs: 0 })],
  ['isolate, in-process', () => new IsolateSandbox({ limits })],
  ['isolate, in-process, hand-off never spinning (spinMs 0)', () => new IsolateSandbox({ limits, spinMs: 0 })],
  ['worker, process tier', () => new ProcessSandbox({ limits, backend: workerBackend })],
  ['isolate, process tier', () => new ProcessSandbox({ limits, backend: isolateBackend })],
]

const nop = nopTool('echo', 'answers at once')

let ids = 0
async function deployment(kind: 'worker' | 'isolate', isolation: 'in-process' | 'process') {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'code', maxParallelSubCalls: 64 })
  ctx.plugin(kind === 'worker' ? WorkerSandboxService : IsolateSandboxService, { isolation, limits })
  await ctx.start()
  await (ctx.get('codeRuntime') as unknown as { ready(): Promise<void> }).ready()
  ctx.tools.register(nop)
  const tools = ctx.tools
  const signal = new AbortController().signal
  const run = async (code: string) => {
    const result = await tools.execute({ callId: `n${++ids}`, name: 'run_code', arguments: { code, description: 'bench' }, signal })
    if (result.isError) throw new Error(result.content)
  }
  return { ctx, run }
}

// the shape of most programs a model writes: a few sequential calls (`const a = await tools.read(…); await tools.edit(…)`),
// each run in a fresh context whose code starts cold, and in a deployment that has run many such. the rows above make
// 2000 calls a run, and their figure is what a call costs once the run's code is warm and the hand-off spins; these are
// runs of 0, FEW and MORE calls, interleaved, 30 of each: the medians' differences per call
const FEW = 5
const MORE = 20
async function fewCalls(run: (code: string) => Promise<void>) {
  const calls = [0, FEW, MORE]
  const times = calls.map(() => [] as number[])
  for (let i = 0; i < 30; i++) {
    for (const [index, count] of calls.entries()) {
      const started = performance.now()
      await run(count === 0 ? 'return 1' : `for (let i = 0; i < ${count}; i++) await tools.echo({ i })`)
      times[index].push((performance.now() - started) * 1000)
    }
  }
  const [none, few, more] = times.map(median)
  return { first: Math.max(0, few - none) / FEW, later: Math.max(0, more - few) / (MORE - FEW) }
}

interface FirstRun {
  setupMs: number
  warmSetupMs: number
  warmSetupThreadMs: number
  backToBackSetupMs: number
  backToBackSetupThreadMs: number
  floorSetupMs: number
  floorSetupThreadMs: number
  setupsWithGc: number
  readyMs?: number
  firstMs: number
  firstCpuMs: number
  warmMs: number
  warmCpuMs: number
  firstThreadMs?: number
  warmThreadMs?: number
}

const firstRunHost = fileURLToPath(new URL('./_first-run.ts', import.meta.url))

// a deployment's start and first run_code, each in a fresh process (bench/_first-run.ts), one after another
async function firstRuns(kind: 'worker' | 'isolate', isolation: 'in-process' | 'process', mode: 'ready' | 'immediate', times: number) {
  const runs: FirstRun[] = []
  for (let i = 0; i < times; i++) {
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, ['--no-node-snapshot', '--import', 'tsx/esm', firstRunHost, kind, isolation, mode], (error, stdout, stderr) =>
        error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout),
      ),
    )
    runs.push(JSON.parse(stdout))
  }
  return runs
}

const bridged = [
  ['worker, in-process', 'worker', 'in-process'],
  ['worker, process tier', 'worker', 'process'],
  ['isolate, in-process', 'isolate', 'in-process'],
  ['isolate, process tier', 'isolate', 'process'],
] as const

// the calling thread's CPU time in µs, where the kernel reports it per thread (Linux: /proc/thread-self/schedstat, in
// ns): what the host's own thread spent, whatever the sandbox's threads did meanwhile. undefined elsewhere
const threadCpu: (() => number) | undefined = (() => {
  const read = () => Number(readFileSync('/proc/thread-self/schedstat', 'latin1').split(' ')[0]) / 1000
  try {
    return Number.isFinite(read()) ? read : undefined
  } catch {
    return undefined
  }
})()

const quartiles = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b)
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.round(q * (sorted.length - 1)))]
  return { least: sorted[0], low: at(0.25), median: median(sorted), high: at(0.75) }
}

// one deployment's sandbox, alone (run directly) and under run_code, measured in alternation, many short rounds:
// each round measures alone, full, full, alone (a drift on a shared machine within the round cancels), each a
// sequential program of BRIDGE_CALLS calls less a trivial run just before it. per round: the difference per call of
// the latency, and of the host thread's CPU time (the bridge runs there; the sandbox's threads do not count, but a
// hand-off that spins on the host thread does, more when replies leave later). the figures are the medians over the
// rounds, with their quartiles
const BRIDGE_CALLS = 1000
const BRIDGE_ROUNDS = Number(process.env.NESTED_BRIDGE_ROUNDS ?? 15)
async function bridgeCost(kind: 'worker' | 'isolate', isolation: 'in-process' | 'process') {
  // alone is the deployment's own sandbox, run directly: a second sandbox would put the two sides on other workers or
  // isolates, whose hand-offs can settle differently (the bimodal figures across processes) and show as the bridge's
  const { ctx, run } = await deployment(kind, isolation)
  const runtime = ctx.get('codeRuntime') as CodeRuntime
  const signal = new AbortController().signal
  const alone = async (code: string) => {
    const outcome = await runtime.run({ code, tools: ['echo'], call: echo, signal, limits })
    if (!outcome.ok) throw new Error(`${outcome.kind}: ${outcome.message}`)
  }
  const program = `for (let i = 0; i < ${BRIDGE_CALLS}; i++) await tools.echo({ i })`
  // per call of `op`'s sequential program beyond its trivial run: latency, and the host thread's CPU time
  const perCallOf = async (op: (code: string) => Promise<void>) => {
    let start = performance.now()
    let cpu = threadCpu?.() ?? 0
    await op('return 1')
    const trivial = performance.now() - start
    const trivialCpu = (threadCpu?.() ?? 0) - cpu
    start = performance.now()
    cpu = threadCpu?.() ?? 0
    await op(program)
    const wall = performance.now() - start
    const programCpu = (threadCpu?.() ?? 0) - cpu
    return { us: ((wall - trivial) * 1000) / BRIDGE_CALLS, cpuUs: (programCpu - trivialCpu) / BRIDGE_CALLS }
  }
  for (let i = 0; i < 3; i++) {
    await perCallOf(alone)
    await perCallOf(run)
  }
  const latency: number[] = []
  const cpu: number[] = []
  const fulls: number[] = []
  const alones: number[] = []
  for (let i = 0; i < BRIDGE_ROUNDS; i++) {
    const a1 = await perCallOf(alone)
    const f1 = await perCallOf(run)
    const f2 = await perCallOf(run)
    const a2 = await perCallOf(alone)
    fulls.push(f1.us, f2.us)
    alones.push(a1.us, a2.us)
    latency.push((f1.us + f2.us - a1.us - a2.us) / 2)
    cpu.push((f1.cpuUs + f2.cpuUs - a1.cpuUs - a2.cpuUs) / 2)
  }
  await ctx.stop()
  // a shared machine only ever adds time: the least disturbed sample of each side is another estimate
  return {
    latency: quartiles(latency),
    cpu: threadCpu ? quartiles(cpu) : undefined,
    least: Math.min(...fulls) - Math.min(...alones),
    full: median(fulls),
    alone: median(alones),
  }
}

// the bridge's own cost on the host's thread, with no sandbox and no thread in between: calls enter RunBridge (the host
// side every backend uses) one after another, each on the turn of the event loop after the last reply left, under a
// run_code program or answered at once, in alternating rounds; the CPU time per call, which a shared machine disturbs
// much less than a latency. (back to back in one turn, without the event loop between them, it is about half)
async function bridgeHostCpu() {
  const calls = 20000
  let drive: (request: CodeRunRequest) => Promise<void> = async () => {}
  class Driven extends Service {
    readonly backend = 'driven'
    constructor(ctx: Context) {
      super(ctx, 'codeRuntime', true)
    }
    async run(request: CodeRunRequest) {
      await drive(request)
      return { ok: true as const, logs: [] }
    }
    load() {
      return { running: 0, queued: 0, maxConcurrent: 1, peakRunning: 0, peakQueued: 0 }
    }
  }
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'code', maxParallelSubCalls: 64 })
  ctx.plugin(Driven)
  await ctx.start()
  ctx.tools.register(nop)
  const signal = new AbortController().signal
  const cpuPerCall = (request: CodeRunRequest) => {
    const start = process.cpuUsage()
    return new Promise<number>((resolve) => {
      let i = 0
      const bridge = new RunBridge(
        request,
        limits,
        () => false,
        () => {},
        () => {
          // the next call on a later turn of the event loop, as a program's calls arrive
          if (++i < calls) return void setImmediate(() => bridge.call(i, 'echo', `{"i":${i}}`))
          const cpu = process.cpuUsage(start)
          resolve((cpu.user + cpu.system) / calls)
        },
      )
      bridge.call(0, 'echo', '{"i":0}')
    })
  }
  const full: number[] = []
  const alone: number[] = []
  for (let round = 0; round < 11; round++) {
    drive = async (request) => void full.push(await cpuPerCall(request))
    await ctx.tools.execute({ callId: `b${round}`, name: 'run_code', arguments: { code: 'return 1', description: 'bench' }, signal })
    alone.push(await cpuPerCall({ code: '', tools: ['echo'], call: echo, signal }))
  }
  await ctx.stop()
  // the rounds' own differences: a round's load fell on both of its sides
  return quartiles(full.map((us, round) => us - alone[round]))
}

// the reference's context setup (the seed's own implementation, measured on this machine in a warmed process)
const REFERENCE_SETUP_MS = 6.5

// a deployment's context setup and its first run_code, each in fresh processes (bench/_first-run.ts). each figure the
// median over NESTED_FIRST_RUNS processes (3 by default), against the warm run_code measured in the same processes (a
// trivial program of its own each run): what a deployment's first model turn finds. cpu: the host process's, all
// threads; host thread: the host's own thread alone (Linux), which the sandbox's threads do not add to
async function firstRunRows(figures: Record<string, number>) {
  const times = Number(process.env.NESTED_FIRST_RUNS ?? 3)
  console.log(`\na deployment's start and first run_code, each in a fresh process (median of ${times}; × the warm run_code there)`)
  console.log(`  context setup rows: × the reference's ${REFERENCE_SETUP_MS} ms; the warm, spaced one is the one to compare with it. the cordis`)
  console.log(`  floor: the same Context with two services that do nothing, timed alike in the same rounds: setup − floor is Faber's`)
  for (const kind of ['worker', 'isolate'] as const) {
    for (const isolation of ['in-process', 'process'] as const) {
      const label = `${kind}, ${isolation === 'process' ? 'process tier' : 'in-process'}`
      if (!label.includes(only)) continue
      const ready = await firstRuns(kind, isolation, 'ready', times)
      const immediate = await firstRuns(kind, isolation, 'immediate', 1)
      const of = (key: keyof FirstRun, runs = ready) => median(runs.map((run) => (run[key] ?? 0) * 1000))
      const warm = of('warmMs')
      const reference = REFERENCE_SETUP_MS * 1000
      row(`${label}: context setup, first in the process`, of('setupMs'), reference, 'none: cold cordis and modules')
      row(`${label}: context setup, warm (median of 30)`, of('warmSetupMs'), reference, `≤ ${REFERENCE_SETUP_MS} ms, the reference`)
      row(`${label}: context setup, warm, back to back`, of('backToBackSetupMs'), reference)
      row(`${label}: cordis floor, 2 idle services`, of('floorSetupMs'), reference)
      console.log(
        `  ${''.padEnd(48)} thread cpu: setup ${(of('warmSetupThreadMs') / 1000).toFixed(2)} ms, back to back ${(of('backToBackSetupThreadMs') / 1000).toFixed(2)} ms, floor ${(of('floorSetupThreadMs') / 1000).toFixed(2)} ms; setups a gc fell into: ${ready.map((run) => run.setupsWithGc).join(' ')} of ${3 * 30} per process`,
      )
      row(`${label}: first run_code right after start`, of('firstMs', immediate), of('warmMs', immediate))
      row(`${label}: background warm-up (ready()) after start`, of('readyMs'), warm)
      row(`${label}: first run_code after the warm-up`, of('firstMs'), warm, '≤ 2× warm')
      row(`${label}: warm run_code`, warm, warm)
      row(`${label}: host cpu, first run_code after the warm-up`, of('firstCpuMs'), of('warmCpuMs'))
      if (threadCpu) row(`${label}: host thread cpu, first run after warm-up`, of('firstThreadMs'), of('warmThreadMs'))
      // the ratio that counts: within each process, where the load on a shared machine hit both alike
      const ratios = ready.map((run) => run.firstMs / run.warmMs)
      const cpuRatios = ready.map((run) => run.firstCpuMs / run.warmCpuMs)
      const threadRatios = ready.map((run) => (run.firstThreadMs ?? 0) / (run.warmThreadMs || 1))
      console.log(
        `  ${''.padEnd(48)} first ÷ warm per process: ${ratios.map((r) => r.toFixed(1)).join(' ')}, median ${median(ratios).toFixed(1)}× (target ≤ 2×); host cpu ${cpuRatios.map((r) => r.toFixed(1)).join(' ')}${threadCpu ? `; host thread ${threadRatios.map((r) => r.toFixed(1)).join(' ')}` : ''}`,
      )
      Object.assign(figures, {
        [`${label}.setupMs`]: of('setupMs') / 1000,
        [`${label}.warmSetupMs`]: of('warmSetupMs') / 1000,
        [`${label}.backToBackSetupMs`]: of('backToBackSetupMs') / 1000,
        [`${label}.floorSetupMs`]: of('floorSetupMs') / 1000,
        [`${label}.warmSetupThreadMs`]: of('warmSetupThreadMs') / 1000,
        [`${label}.floorSetupThreadMs`]: of('floorSetupThreadMs') / 1000,
        [`${label}.immediateMs`]: of('firstMs', immediate) / 1000,
        [`${label}.readyMs`]: of('readyMs') / 1000,
        [`${label}.firstMs`]: of('firstMs') / 1000,
        [`${label}.firstWarmMs`]: warm / 1000,
        [`${label}.firstCpuMs`]: of('firstCpuMs') / 1000,
        [`${label}.warmCpuMs`]: of('warmCpuMs') / 1000,
        [`${label}.firstRatio`]: median(ratios),
        [`${label}.firstThreadRatio`]: median(threadRatios),
      })
    }
  }
}

// the bridge's own cost rows: through each deployment's sandbox, and on the host's thread with no sandbox
async function bridgeRows(figures: Record<string, number>, rtt: number) {
  console.log(`\nthe bridge's own cost: full stack minus sandbox alone, ${BRIDGE_ROUNDS} interleaved rounds (median [quartiles])`)
  for (const [label, kind, isolation] of bridged) {
    if (!label.includes(only)) continue
    const cost = await bridgeCost(kind, isolation)
    const spread = (q: { low: number; high: number }) => `[${q.low.toFixed(1)} – ${q.high.toFixed(1)}]`
    row(`${label}: bridge's own cost (full − alone)`, cost.latency.median, rtt, '≤ 5 µs')
    console.log(
      `  ${''.padEnd(48)} rounds ${spread(cost.latency)} µs; full ${cost.full.toFixed(1)}, alone ${cost.alone.toFixed(1)} µs a call; fastest full − fastest alone ${cost.least.toFixed(1)} µs`,
    )
    if (cost.cpu) {
      row(`${label}: host thread CPU, full − alone`, cost.cpu.median, rtt)
      console.log(`  ${''.padEnd(48)} rounds ${spread(cost.cpu)} µs`)
    }
    Object.assign(figures, { [`${label}.bridgeUs`]: cost.latency.median, [`${label}.bridgeHostThreadCpuUs`]: cost.cpu?.median })
  }

  if ('bridge'.includes(only)) {
    const host = await bridgeHostCpu()
    row("the bridge's own host CPU per call (no sandbox)", host.median, rtt, '≤ 5 µs')
    console.log(`  ${''.padEnd(48)} rounds [${host.low.toFixed(2)} – ${host.high.toFixed(2)}] µs; least ${host.least.toFixed(2)} µs`)
    Object.assign(figures, { bridgeHostCpuUs: host.median })
  }
}

export async function benchNested() {
  const figures: Record<string, number> = {}
  // NESTED_PART=first: only the context setup and first-run rows (fresh processes; no floors, no other sections)
  if (process.env.NESTED_PART === 'first') {
    await firstRunRows(figures)
    return figures
  }
  // NESTED_PART=bridge: only the bridge's own cost rows (against the postMessage round trip measured first)
  if (process.env.NESTED_PART === 'bridge') {
    const rtt = await postMessageFloor()
    row('floor: worker postMessage round trip', rtt, rtt)
    await bridgeRows(figures, rtt)
    return figures
  }
  // NESTED_PART=execute: only plain ctx.tools.execute against a held reference
  if (process.env.NESTED_PART === 'execute') {
    await executeRows(figures)
    return figures
  }
  console.log('nested calls: floors (same process, same run)')
  const rtt = await postMessageFloor()
  const spin = await spinFloor()
  const applySync = await applySyncFloor()
  const vmCall = await vmFloor()
  row('floor: worker postMessage round trip', rtt, rtt)
  row('floor: SharedArrayBuffer hand-off, both spinning', spin, rtt)
  row('floor: isolated-vm applySync', applySync, rtt)
  row('floor: in-process vm awaiting an async host call', vmCall, rtt)
  const fresh = await freshContextFloor()
  row('floor: fresh isolate context, its own await loop', fresh, rtt)
  Object.assign(figures, { rttUs: rtt, spinUs: spin, applySyncUs: applySync, vmCallUs: vmCall, freshContextUs: fresh })

  console.log('\nthe sandbox alone, the host answering at once (× postMessage round trip)')
  const sideLabel = "worker, in-process: the worker's side alone (host spinning)"
  if (sideLabel.includes(only)) {
    const side = await workerSideAlone()
    row(sideLabel, side, rtt)
    Object.assign(figures, { 'worker, in-process.workerSideUs': side })
  }
  const isolateSideLabel = "isolate, in-process: the isolate's side alone (answered in it)"
  if (isolateSideLabel.includes(only)) {
    const side = await isolateSideAlone()
    row(isolateSideLabel, side, rtt)
    Object.assign(figures, { 'isolate, in-process.isolateSideUs': side })
  }
  for (const [label, make] of sandboxes) {
    if (!label.includes(only)) continue
    const runtime = make()
    const counts = runtime instanceof WorkerSandbox || runtime instanceof IsolateSandbox ? () => runtime.handoffStats() : undefined
    const before = counts?.()
    const seq = await perCall(runtime, sequential, N)
    const after = counts?.()
    const par = await perCall(runtime, parallel, P)
    // in-process, where the hand-off may spin (and the same with spinMs 0): what waiting and computing cost in CPU
    const handsOff = label.startsWith('worker, in-process') || label === 'isolate, in-process' || label.startsWith('isolate, in-process, hand-off')
    const slow = label.startsWith('worker') || handsOff ? await cpuWhenSlow(runtime) : undefined
    const computing = handsOff ? await cpuWhenComputing(runtime) : undefined
    // each run is a fresh context whose code starts cold: a program making many calls shows the call past that warm-up
    const long = label.startsWith('isolate') ? await perCall(runtime, `for (let i = 0; i < ${10 * N}; i++) await tools.echo({ i })`, 10 * N, 1) : undefined
    await runtime.close()
    const target = label === 'isolate, in-process' ? '≤ 10 µs and ≤ 0.25×' : label === 'worker, in-process' ? '≤ 0.6×' : undefined
    row(`${label}: sequential nested call`, seq.micros, rtt, target)
    console.log(
      `  ${''.padEnd(48)} single runs (${3 * 3}): median ${seq.spread.median.toFixed(1)} µs [${seq.spread.low.toFixed(1)} – ${seq.spread.high.toFixed(1)}]; the row is the fastest round's`,
    )
    row(`${label}: under Promise.all`, par.micros, rtt)
    row(`${label}: CPU per seq. call (all threads)`, seq.cpuPerCall, rtt)
    if (long !== undefined) row(`${label}: sequential, ${10 * N} calls a run`, long.micros, rtt)
    if (long !== undefined) row(`${label}: CPU per call, ${10 * N} a run`, long.cpuPerCall, rtt)
    if (slow !== undefined) row(`${label}: CPU per call, 1 ms tool`, slow, rtt)
    if (computing !== undefined) row(`${label}: CPU per call, ~0.1 ms computing between`, computing, rtt)
    const sandboxSide = label.startsWith('isolate') ? 'isolate' : 'worker'
    if (before && after) {
      // what the hand-off did during the sequential runs: which way calls and replies went, and the spins that caught
      const share = (lane: 'calls' | 'replies') => {
        const ring = after[lane].ring - before[lane].ring
        return `${((100 * ring) / Math.max(1, ring + after[lane].port - before[lane].port)).toFixed(0)}%`
      }
      const spins = (lane: 'calls' | 'replies') =>
        `${after[lane].caught - before[lane].caught}/${after[lane].caught - before[lane].caught + after[lane].missed - before[lane].missed}`
      console.log(
        `  ${label}: sequential runs' hand-off: through the ring ${share('calls')} of the ${sandboxSide}'s messages, ${share('replies')} of the replies; spins that caught: host ${spins('calls')}, ${sandboxSide} ${spins('replies')}`,
      )
    }
    Object.assign(figures, {
      [`${label}.sequentialUs`]: seq.micros,
      [`${label}.sequentialMedianUs`]: seq.spread.median,
      [`${label}.parallelUs`]: par.micros,
      [`${label}.cpuPerCallUs`]: seq.cpuPerCall,
    })
    if (long !== undefined) Object.assign(figures, { [`${label}.sequentialLongUs`]: long.micros, [`${label}.cpuPerCallLongUs`]: long.cpuPerCall })
  }

  console.log('\nthe full stack: run_code → bridge → pipeline → body → back')
  for (const kind of ['worker', 'isolate'] as const) {
    for (const isolation of ['in-process', 'process'] as const) {
      const label = `${kind}, ${isolation === 'process' ? 'process tier' : 'in-process'}`
      if (!label.includes(only)) continue
      const { ctx, run } = await deployment(kind, isolation)
      const warm = await timeOp(() => run('return 1'), 50, 3)
      const seq = Math.max(0, (await timeOp(() => run(sequential), 2, 3)) - warm) / N
      const par = Math.max(0, (await timeOp(() => run(parallel), 2, 3)) - warm) / P
      const few = await fewCalls(run)
      await ctx.stop()
      row(`${label}: warm run_code`, warm, rtt)
      row(`${label}: sequential nested call`, seq, rtt)
      row(`${label}: under Promise.all`, par, rtt)
      row(`${label}: a program of ${FEW} sequential calls, a call`, few.first, rtt)
      row(`${label}: its calls ${FEW + 1}–${MORE}, a call`, few.later, rtt)
      Object.assign(figures, {
        [`${label}.warmMs`]: warm / 1000,
        [`${label}.fullSequentialUs`]: seq,
        [`${label}.fullParallelUs`]: par,
        [`${label}.fewCallsUs`]: few.first,
        [`${label}.fewCallsLaterUs`]: few.later,
      })
    }
  }

  await firstRunRows(figures)

  await bridgeRows(figures, rtt)

  await executeRows(figures)
  return figures
}

/** plain `ctx.tools.execute` against a held reference */
async function executeRows(figures: Record<string, number>) {
  // held and plain in alternating rounds (which goes first alternates too), each round 5000 calls after 500 unmeasured:
  // the medians over the rounds, so a burst of load on the machine falls on one round of each, not on one side
  console.log('\nexecute through ctx.tools (held and plain in 15 alternating rounds; median [quartiles])')
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  await ctx.start()
  ctx.tools.register(nop)
  const signal = new AbortController().signal
  const held = ctx.tools
  const heldOp = () => held.execute({ callId: 'h', name: 'echo', arguments: {}, signal })
  const plainOp = () => ctx.tools.execute({ callId: 'p', name: 'echo', arguments: {}, signal })
  const perCallUs = async (op: () => Promise<unknown>) => {
    for (let i = 0; i < 500; i++) await op()
    const start = performance.now()
    for (let i = 0; i < 5000; i++) await op()
    return ((performance.now() - start) * 1000) / 5000
  }
  const helds: number[] = []
  const plains: number[] = []
  for (let round = 0; round < 15; round++) {
    if (round % 2) plains.push(await perCallUs(plainOp))
    helds.push(await perCallUs(heldOp))
    if (!(round % 2)) plains.push(await perCallUs(plainOp))
  }
  await ctx.stop()
  const heldQ = quartiles(helds)
  const plainQ = quartiles(plains)
  // plain less held is cordis' read of ctx.tools (a tracing proxy and a captured stack per read): the framework's cost,
  // which no change in Faber moves, so the target is on Faber's path, the held reference
  row('held reference: execute', heldQ.median, heldQ.median, '≤ 3 µs')
  row('plain ctx.tools.execute', plainQ.median, heldQ.median)
  row("  of it cordis' read of ctx.tools (plain − held)", plainQ.median - heldQ.median, heldQ.median)
  console.log(
    `  ${''.padEnd(48)} rounds: held [${heldQ.low.toFixed(2)} – ${heldQ.high.toFixed(2)}], plain [${plainQ.low.toFixed(2)} – ${plainQ.high.toFixed(2)}] µs; fastest rounds (least disturbed) held ${heldQ.least.toFixed(2)}, plain ${plainQ.least.toFixed(2)} µs`,
  )
  Object.assign(figures, { heldExecuteUs: heldQ.median, plainExecuteUs: plainQ.median })
}

if (isMain(import.meta.url)) await benchNested()
