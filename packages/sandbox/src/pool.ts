// what every backend shares, so that a backend is a driver (contract.ts): `SandboxPool`, the run prologue, the cap, a warm
// pool of a driver's units, and one run's host side (its bridge, which takes its reports; its budgets; its end, once)

import { messageOf } from '@faber/core/message'
import { RunBridge } from './bridge.ts'
import { limitMessages } from './budgets.mjs'
import type { ProgramHandle, SandboxDriver, Unit } from './contract.ts'
import { defaultMaxConcurrent, Gate } from './gate.ts'
import { wrapProgram } from './prelude.mjs'
import {
  type CodeFailureKind,
  type CodeRunLimits,
  type CodeRunOutcome,
  type CodeRunRequest,
  type CodeRuntime,
  type CodeRuntimeLoad,
  defaultCodeLimits,
} from './types.ts'
import { WallClock } from './wall.ts'

const MB = 1024 * 1024

export interface PoolOptions {
  /** fills in any limit a request leaves out; `memoryMb` also sizes the pooled units (fixed when one is made) */
  limits?: Partial<CodeRunLimits>
  /** programs running at once; runs beyond it wait in order (default: two per core, at least 2) */
  maxConcurrent?: number
  /** units (workers, isolates) kept made, warm and waiting; overlapping runs beyond it get one made on demand */
  poolSize?: number
  /** runs a unit serves before it is replaced (default 200); sooner once what runs left in its heap is half its memoryMb */
  maxRuns?: number
  /** ms a unit beyond poolSize (made on demand for a run that overlapped others) waits idle for another run (default 1000) */
  surplusLingerMs?: number
}

// a trivial run with one tool call: the first real run on a unit then finds the prelude and the bridge compiled. a signal
// each: one shared by every unit warming in the process collected a listener each (past 10, node warns of a leak)
export const warmUp = (): CodeRunRequest => ({
  code: 'await tools.warm({})\nreturn 1',
  tools: ['warm'],
  call: async () => ({ ok: true, value: 'null' }),
  signal: new AbortController().signal,
})

const failure = (kind: CodeFailureKind, message: string): CodeRunOutcome => ({ ok: false, kind, message, logs: [] })
const unstarted = (closed: boolean) => failure('abort', closed ? 'the sandbox was closed before the run started' : 'the run was aborted before it started')

const nextTurn = () => new Promise((resolve) => setImmediate(resolve))

/** a CodeRuntime on a warm pool of units made by a driver (contract.ts), one run per unit at a time */
export class SandboxPool<U extends Unit> implements CodeRuntime {
  readonly backend: string
  readonly limits: CodeRunLimits
  protected readonly gate: Gate
  protected closed = false
  readonly poolSize: number
  readonly maxRuns: number
  private idle: U[] = []
  // the unit fill() is making, one at a time
  private making: { unit: Promise<U>; claimed: boolean } | undefined
  // the runs going on, by how each is ended
  private running = new Set<(outcome: CodeRunOutcome) => void>()
  // a unit made in the background failed: no more are made in a loop; the next run makes one and reports the error
  private makeFailed = false
  private waiters: (() => void)[] = []
  // the heap a unit holds of its own (see roomy), once a warm-up measured it
  private ownHeap: number | undefined
  // units of the pool's memoryMb out on runs: they count towards poolSize, as they will serve again. uncounted, a unit
  // made while one was out found the pool short, and the one coming back found it full and was disposed (a worker
  // spawned every ~90 ms under back-to-back runs)
  private out = 0
  readonly surplusLingerMs: number
  private madeCount = 0
  private trimTimer: NodeJS.Timeout | undefined

  constructor(
    protected readonly driver: SandboxDriver<U>,
    options: PoolOptions,
  ) {
    this.limits = { ...defaultCodeLimits, ...options.limits }
    this.gate = new Gate(options.maxConcurrent ?? defaultMaxConcurrent())
    this.backend = driver.backend
    this.poolSize = options.poolSize ?? 2
    this.maxRuns = options.maxRuns ?? 200
    this.surplusLingerMs = options.surplusLingerMs ?? 1000
    if (!(Number.isInteger(this.maxRuns) && this.maxRuns >= 1))
      throw new RangeError(`maxRuns (maxRunsPerWorker, maxRunsPerIsolate) must be a whole number of at least 1, got ${this.maxRuns}`)
    if (!(this.surplusLingerMs >= 0 && this.surplusLingerMs <= 2 ** 31 - 1))
      throw new RangeError(`surplusLingerMs must be a number of ms from 0 to 2147483647, got ${this.surplusLingerMs}`)
    // the first unit is made on the next turn: the subclass is constructed by then
    this.fill()
  }

  /** units (workers, isolates) made since the sandbox was, warm-ups and replacements included */
  get unitsMade() {
    return this.madeCount
  }

  /** resolves once the pool's units are made and warmed (or could not be): a run then costs what a warm one does */
  ready(): Promise<void> {
    if (this.full()) return Promise.resolve()
    return new Promise((resolve) => this.waiters.push(resolve))
  }

  /** ends every unit, and then what the driver holds; runs in progress end with kind `abort` */
  async close() {
    const busy = this.gate.load().running > 0
    this.closed = true
    clearTimeout(this.trimTimer)
    this.gate.drain()
    this.answerWaiters()
    for (const finish of [...this.running]) finish(failure('abort', 'the sandbox was closed during the run'))
    await Promise.all(this.idle.splice(0).map((unit) => this.driver.dispose(unit)))
    this.driver.close?.(busy)
  }

  async run(request: CodeRunRequest): Promise<CodeRunOutcome> {
    const limits = { ...this.limits, ...request.limits }
    if (this.closed) return failure('crash', 'the sandbox is closed')
    if (request.signal.aborted) return unstarted(false)
    const leave = await this.gate.acquire(request.signal)
    if (leave === undefined) return unstarted(this.closed)
    try {
      return await this.admit(request, limits)
    } finally {
      leave()
    }
  }

  load(): CodeRuntimeLoad {
    return this.gate.load()
  }

  private async admit(request: CodeRunRequest, limits: CodeRunLimits): Promise<CodeRunOutcome> {
    let unit: U | undefined
    try {
      unit = await this.acquire(limits.memoryMb, request.signal)
    } catch (error) {
      // the unit it waited for (one being warmed) failed because the sandbox closed: that is no crash
      if (this.closed) return unstarted(true)
      return failure('crash', `${this.driver.createFailure}: ${messageOf(error)}`)
    }
    if (unit === undefined) return unstarted(false)
    if (this.pooled(unit.memoryMb)) this.out++
    // an abort while the run awaited its place or a unit that was ready is heard by nobody: the run listens once started
    if (request.signal.aborted || this.closed) {
      this.settle(unit, true)
      return unstarted(!request.signal.aborted)
    }
    const [outcome, reuse] = await this.execute(unit, request, limits)
    this.settle(unit, reuse)
    return outcome
  }

  // units lost while out (on a run, or warming): they are ended when they come back
  private gone = new WeakSet<U>()

  /** a unit died or may serve no more: an idle one leaves the pool, and another is made */
  private lost(unit: U) {
    const index = this.idle.indexOf(unit)
    if (index === -1) return void this.gone.add(unit)
    this.idle.splice(index, 1)
    this.fill()
  }

  // one run's host side, the same for every backend: its bridge (which takes its reports), its budgets, and its end, once:
  // the outcome, and whether its unit may serve again. the warm-up is not one of the `maxRuns` a unit serves: counted, at
  // maxRuns 1 it used up every unit, and each run that claimed a warming one failed
  private execute(unit: U, request: CodeRunRequest, limits: CodeRunLimits, warm = false) {
    if (!warm) unit.runs++
    return new Promise<[outcome: CodeRunOutcome, reuse: boolean]>((resolve) => {
      let handle: ProgramHandle | undefined
      // whether the unit serves again, once the run ended (`heap` is the unit's after a clean end; left out, it serves no more)
      let reuse: boolean | undefined
      let cpuTimer: NodeJS.Timeout | undefined
      const finish = (outcome: CodeRunOutcome, heap?: number) => {
        if (reuse !== undefined) return
        reuse = heap !== undefined && unit.runs < this.maxRuns && this.roomy(unit, heap, warm)
        clearTimeout(cpuTimer)
        wall.end()
        request.signal.removeEventListener('abort', onAbort)
        this.running.delete(finish)
        handle?.end(reuse)
        resolve([outcome, reuse])
      }
      const bridge = new RunBridge(
        request,
        limits,
        () => reuse !== undefined,
        finish,
        (call, reply) => handle?.deliver(call, reply),
      )
      const wall = new WallClock(limits.wallMs, () => bridge.failed('timeout', limitMessages.wall(limits)))
      const onAbort = () => bridge.failed('abort', 'the run was aborted')
      const started = this.driver.start(unit, { request, limits, source: wrapProgram(request.code) }, bridge)
      handle = started
      // a run the driver ended as it started (a program that does not compile) ends its handle once it has it
      if (reuse !== undefined) return started.end(reuse)
      // the program started: an abort or the sandbox closing ends it, and so do its wall-clock budget (stopped while it
      // waits on a person) and its cpu budget, read from the handle (undefined: it cannot tell any more, and polling stops)
      const checkCpu = async () => {
        const reading = await started.cpuUsed()
        if (reading === undefined || reuse !== undefined) return
        // below 0 is none spent: a driver that takes its own overhead off its clock (the worker's, QuickJS's, the isolate's
        // spins) may read a little under 0, and a reading far under it asked again every ms, past what a timer takes
        const used = Math.max(0, reading)
        if (used >= limits.cpuMs) return bridge.failed('timeout', limitMessages.cpu(limits))
        // cpu time grows no faster than the clock, so nothing can be over budget before then
        cpuTimer = setTimeout(checkCpu, Math.max(1, limits.cpuMs - used))
      }
      request.signal.addEventListener('abort', onAbort, { once: true })
      this.running.add(finish)
      cpuTimer = setTimeout(checkCpu, limits.cpuMs)
      wall.start(request.waits)
    })
  }

  // what a unit holds of its own (its runtime, the prelude, a fresh context: 1-7 MB) is its heap after a warm-up, the
  // least seen in this pool. a unit serves again while what its runs left beyond that is under half its memoryMb (counted
  // whole, a worker pool at memoryMb 8 discarded every unit after its warm-up)
  private roomy(unit: U, heap: number, warm: boolean) {
    if (warm) this.ownHeap = Math.min(this.ownHeap ?? heap, heap)
    return heap - (this.ownHeap ?? 0) < (unit.memoryMb * MB) / 2
  }

  // a unit back from a run (admit's `out`)
  private settle(unit: U, reuse: boolean) {
    if (this.pooled(unit.memoryMb)) this.out--
    if (reuse) this.release(unit)
    else this.discard(unit)
  }

  private async acquire(memoryMb: number, signal: AbortSignal): Promise<U | undefined> {
    const pooled = this.pooled(memoryMb)
    const ready = pooled ? this.idle.pop() : undefined
    if (ready) return ready
    const making = pooled && !this.making?.claimed ? this.making : undefined
    if (making) making.claimed = true
    const pending = making ? making.unit : this.make(memoryMb)
    this.fill()
    let onAbort!: () => void
    const aborted = new Promise<undefined>((resolve) => signal.addEventListener('abort', (onAbort = () => resolve(undefined)), { once: true }))
    try {
      const unit = await Promise.race([pending, aborted])
      if (unit === undefined)
        void pending.then(
          (unit) => this.release(unit),
          () => {},
        )
      return unit
    } finally {
      signal.removeEventListener('abort', onAbort)
    }
  }

  // a unit made in the background is warmed before any program gets it, and stays out of the pool until then
  private async make(memoryMb: number, warm = false, again = true): Promise<U> {
    if (warm && this.closed) throw new Error('the sandbox was closed')
    let made: U | undefined
    const unit = await this.driver.create(memoryMb, () => made && this.lost(made))
    made = unit
    this.madeCount++
    if (this.makeFailed) {
      // units can be made again: the pool fills again (and a ready() waiting for it is answered)
      this.makeFailed = false
      this.fill()
    }
    if (!warm) return unit
    const [outcome, reuse] = await this.execute(unit, warmUp(), this.limits, true)
    if (reuse && outcome.ok && !this.closed && !this.gone.has(unit)) return unit
    if (reuse) void this.driver.dispose(unit)
    else this.discard(unit)
    if (!outcome.ok) throw new Error(outcome.message)
    if (this.closed) throw new Error('the sandbox was closed')
    // it ran its warm-up well but may not serve again. lost meanwhile (its sandbox process is being replaced): another,
    // warmed, once. else it reported no heap (a driver that cannot tell: each unit serves one run), and a run gets one
    // not warmed (before, the run waiting on it ended crash, told the sandbox was closed)
    if (reuse && again) return await this.make(memoryMb, true, false)
    return await this.make(memoryMb)
  }

  // one beyond poolSize waits surplusLingerMs: under a burst the next runs take it at once (ended at once, 1 000 runs at
  // maxConcurrent 8 and poolSize 2 made 820 workers)
  private release(unit: U) {
    if (this.gone.has(unit)) return this.discard(unit)
    if (this.closed || !this.pooled(unit.memoryMb)) return void this.driver.dispose(unit)
    this.idle.push(unit)
    if (this.pooledUnits() > this.poolSize) {
      clearTimeout(this.trimTimer)
      this.trimTimer = setTimeout(this.trim, this.surplusLingerMs)
      this.trimTimer.unref()
    }
  }

  // a request with another memoryMb gets a unit of its own
  private pooled(memoryMb: number) {
    return memoryMb === this.limits.memoryMb
  }

  // the pool's units: idle, out on runs (they come back), and being made for no run yet
  private pooledUnits() {
    return this.idle.length + this.out + (this.making && !this.making.claimed ? 1 : 0)
  }

  // the idle units beyond poolSize, the ones idle longest first
  private trim = () => {
    this.trimTimer = undefined
    for (let over = this.pooledUnits() - this.poolSize; over > 0 && this.idle.length > 0; over--) void this.driver.dispose(this.idle.shift()!)
  }

  private discard(unit: U) {
    void this.driver.dispose(unit)
    this.fill()
  }

  private full() {
    return this.makeFailed || this.closed || (!this.making && this.pooledUnits() >= this.poolSize)
  }

  private answerWaiters() {
    if (this.full()) for (const resolve of this.waiters.splice(0)) resolve()
  }

  // keeps `poolSize` units made, in the background, one at a time and each on a turn of the event loop of its own:
  // concurrent makes slow each other down on a small machine, and making the sandbox costs its caller nothing
  private fill() {
    if (this.makeFailed || this.closed || this.making || this.pooledUnits() >= this.poolSize) return this.answerWaiters()
    const making = { unit: nextTurn().then(() => this.make(this.limits.memoryMb, true)), claimed: false }
    this.making = making
    making.unit.then(
      (unit) => {
        this.making = undefined
        if (!making.claimed) this.release(unit)
        this.fill()
      },
      () => {
        this.making = undefined
        if (making.claimed) this.fill()
        else this.makeFailed = true
        this.answerWaiters()
      },
    )
  }
}
