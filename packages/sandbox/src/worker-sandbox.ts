import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from 'node:worker_threads'
import { RunBridge } from './bridge.ts'
import { defaultMaxConcurrent, Gate } from './gate.ts'
import { argumentBytes, failure, limitMessages, maxPendingCalls, messageOf, overheadMb } from './outcome.ts'
import { preludeSource, wrapProgram } from './prelude.ts'
import {
  type CodeFailureKind,
  type CodeRunLimits,
  type CodeRunOutcome,
  type CodeRunRequest,
  type CodeRuntime,
  type CodeRuntimeLoad,
  defaultCodeLimits,
} from './types.ts'

const entry = new URL('./worker.mjs', import.meta.url)

const warmUp: CodeRunRequest = {
  code: 'await tools.warm({})\nreturn 1',
  tools: ['warm'],
  call: async () => ({ ok: true, value: 'null' }),
  signal: new AbortController().signal,
}

// after posting a reply the host may wait a moment on this thread for the program's next call, instead of going back to
// its event loop and being woken: at most `spinMs` per reply, and only while calls came back that fast lately; at most
// `maxBurstMs` of such replies in a row before the event loop gets its turn
const maxBurstMs = 2

export interface WorkerSandboxOptions {
  /** workers kept spawned and waiting; overlapping runs beyond it get a worker spawned on demand */
  poolSize?: number
  /** fills in any limit a request leaves out; `memoryMb` is also the heap limit of the pooled workers */
  limits?: Partial<CodeRunLimits>
  /** programs running at once; runs beyond it wait in order (default: two per core, at least 2) */
  maxConcurrent?: number
  /** runs a worker serves before it is replaced (default 200); it is replaced sooner once its heap is half full */
  maxRunsPerWorker?: number
  /**
   * the longest either side of a nested call spins for the other's answer before it sleeps in its event loop; it spins
   * only while answers came back faster than that lately. default 0, never: on a 2-core machine shared with other work
   * spinning made sequential calls slower and dearer (see the README); try 0.05 where a core is free for it
   */
  spinMs?: number
}

interface Slot {
  worker: Worker
  memoryMb: number
  runs: number
  /** replies to the program's calls, taken by the worker synchronously (see worker.mjs) */
  replies: MessagePort
  /** what the worker posts during a run: calls, logs, its outcome */
  inbox: MessagePort
  /** [0] bumped by the host after each reply it posts, [1] by the worker after each message it posts */
  seq: Int32Array
  /** how long the worker took lately to post again after a reply, in ms: the host spins only when that is short */
  gapMs: number
  /** ms the worker spent spinning for replies: active time on its event loop that is not the program's */
  waited: Float64Array
}

interface Spawn {
  slot: Promise<Slot>
  claimed: boolean
}

type Message =
  | { t: 'ready' }
  | { t: 'call'; id: number; call: number; name: string; json: string }
  | { t: 'log'; id: number; line: string }
  | { t: 'done'; id: number; result?: string; heap: number }
  | { t: 'throw'; id: number; message: string; line?: number; column?: number; heap: number }
  | { t: 'limit' | 'memory'; id: number; reason?: string }

/**
 * the default CodeRuntime: a pool of pre-spawned worker threads, a fresh vm context per run.
 * cpu time is the worker's event-loop active time less what it spent spinning for replies, polled from the host.
 */
export class WorkerSandbox implements CodeRuntime {
  readonly backend = 'worker-vm'
  readonly poolSize: number
  readonly limits: CodeRunLimits
  readonly maxRunsPerWorker: number
  readonly spinMs: number
  private gate: Gate
  private idle: Slot[] = []
  private spawns: Spawn[] = []
  private running = new Set<(outcome: CodeRunOutcome) => void>()
  private closed = false
  private spawnFailed = false
  private seq = 0
  // ready() callers, answered once the pool is full (or cannot fill)
  private waiters: (() => void)[] = []

  constructor(options: WorkerSandboxOptions = {}) {
    this.poolSize = options.poolSize ?? 2
    this.limits = { ...defaultCodeLimits, ...options.limits }
    this.maxRunsPerWorker = options.maxRunsPerWorker ?? 200
    this.spinMs = options.spinMs ?? 0
    this.gate = new Gate(options.maxConcurrent ?? defaultMaxConcurrent())
    this.fill()
  }

  async run(request: CodeRunRequest): Promise<CodeRunOutcome> {
    const limits = { ...this.limits, ...request.limits }
    if (this.closed) return failure('crash', 'the sandbox is closed')
    if (request.signal.aborted) return failure('abort', 'the run was aborted before it started')
    const leave = await this.gate.acquire(request.signal)
    if (leave === undefined) return failure('abort', this.closed ? 'the sandbox was closed before the run started' : 'the run was aborted before it started')
    try {
      let slot: Slot | undefined
      try {
        slot = await this.acquire(limits.memoryMb, request.signal)
      } catch (error) {
        return failure('crash', `could not start a sandbox worker: ${messageOf(error)}`)
      }
      if (slot === undefined) return failure('abort', 'the run was aborted before it started')
      if (this.closed) {
        this.release(slot)
        return failure('abort', 'the sandbox was closed before the run started')
      }
      return await this.execute(slot, request, limits)
    } finally {
      leave()
    }
  }

  load(): CodeRuntimeLoad {
    return this.gate.load()
  }

  /** terminates every worker; runs in progress end with kind `abort` */
  async close() {
    this.closed = true
    this.gate.drain()
    this.answerWaiters()
    for (const stop of [...this.running]) stop(failure('abort', 'the sandbox was closed during the run'))
    const workers = this.idle.map((slot) => slot.worker)
    this.idle = []
    await Promise.all(workers.map((worker) => worker.terminate()))
  }

  /** resolves once the pool's workers are spawned and warmed (or could not be): a run then costs what a warm one does */
  ready(): Promise<void> {
    if (this.full()) return Promise.resolve()
    return new Promise((resolve) => this.waiters.push(resolve))
  }

  private full() {
    return this.spawnFailed || this.closed || (this.spawns.length === 0 && this.idle.length >= this.poolSize)
  }

  private answerWaiters() {
    if (this.full()) for (const resolve of this.waiters.splice(0)) resolve()
  }

  // a trivial run with one tool call on a fresh worker, before any program gets it: the first real run then finds the
  // prelude, the bridge and the hand-off compiled. the worker stays out of the pool until it is done
  private async warm(slot: Slot): Promise<Slot> {
    const outcome = await this.execute(slot, warmUp, this.limits, false)
    if (!outcome.ok || this.closed) {
      void slot.worker.terminate()
      throw new Error(outcome.ok ? 'the sandbox was closed' : outcome.message)
    }
    return slot
  }

  private execute(slot: Slot, request: CodeRunRequest, limits: CodeRunLimits, release = true) {
    const { worker } = slot
    const id = ++this.seq
    let settled = false
    let cpuTimer: NodeJS.Timeout | undefined
    let wallTimer: NodeJS.Timeout | undefined
    const elu = worker.performance.eventLoopUtilization()
    const waitedBefore = slot.waited[0]
    slot.runs++

    return new Promise<CodeRunOutcome>((resolve) => {
      const finish = (outcome: CodeRunOutcome, healthy: boolean) => {
        if (settled) return
        settled = true
        clearTimeout(cpuTimer)
        clearTimeout(wallTimer)
        request.signal.removeEventListener('abort', onAbort)
        slot.inbox.off('message', onMessage)
        worker.off('error', onError)
        worker.off('exit', onExit)
        this.running.delete(stop)
        // terminate() stops the worker's js at once; its promise only reports the thread's exit
        if (!healthy) this.discard(slot)
        else if (release) this.release(slot)
        resolve(outcome)
      }
      const stop = (outcome: CodeRunOutcome) => finish(outcome, false)
      const fail = (kind: CodeFailureKind, message: string) => stop({ ok: false, kind, message, logs: bridge.logs })
      const bridge = new RunBridge(
        request,
        limits,
        () => settled,
        fail,
        (call, reply) => {
          const mark = Atomics.load(slot.seq, 1)
          if (reply.ok) slot.replies.postMessage({ id, call, ok: true, text: reply.value })
          else slot.replies.postMessage({ id, call, ok: false, text: reply.message, code: reply.code })
          Atomics.add(slot.seq, 0, 1)
          repliedAt = performance.now()
          expect(mark)
        },
      )

      // the adaptive half of the hand-off on this side: a brief spin for the worker's next message, taken synchronously
      let repliedAt: number | undefined
      let burst: number | undefined
      const expect = (mark: number) => {
        const spin = slot.gapMs < this.spinMs ? Math.min(this.spinMs, 2 * slot.gapMs + 0.005) : 0
        if (spin === 0) return
        const from = performance.now()
        if (burst === undefined) {
          burst = from
          setImmediate(() => (burst = undefined))
        } else if (from - burst > maxBurstMs) return
        while (Atomics.load(slot.seq, 1) === mark) if (performance.now() - from >= spin) return
        for (let taken = 0; taken < 64 && !settled; taken++) {
          const message = receiveMessageOnPort(slot.inbox)
          if (message === undefined) return
          onMessage(message.message as Message)
        }
      }
      // a worker whose heap stays half full after a run would leave the next program less than its memoryMb
      const healthy = (heap: number) => slot.runs < this.maxRunsPerWorker && heap < (slot.memoryMb * 1024 * 1024) / 2

      const onMessage = (message: Message) => {
        if (repliedAt !== undefined) {
          slot.gapMs = slot.gapMs * 0.75 + (performance.now() - repliedAt) * 0.25
          repliedAt = undefined
        }
        if (message.t === 'ready' || message.id !== id) return
        switch (message.t) {
          case 'call':
            return bridge.call(message.call, message.name, message.json)
          case 'log':
            return void bridge.log(message.line)
          case 'done': {
            const outcome = bridge.returned(message.result)
            return outcome && finish(outcome, healthy(message.heap))
          }
          case 'throw':
            return finish(bridge.threw(message.message, message.line, message.column), healthy(message.heap))
          case 'limit':
            return bridge.overOutput()
          case 'memory':
            return bridge.refused(message.reason)
        }
      }
      const onError = (error: Error & { code?: string }) => {
        if (error.code === 'ERR_WORKER_OUT_OF_MEMORY') fail('memory', limitMessages.memory(limits))
        else fail('crash', `the sandbox worker failed: ${error.message}`)
      }
      const onExit = (code: number) => fail('crash', `the sandbox worker exited unexpectedly (code ${code})`)
      const onAbort = () => fail('abort', 'the run was aborted')

      const checkCpu = () => {
        const active = worker.performance.eventLoopUtilization(elu).active - (slot.waited[0] - waitedBefore)
        if (active >= limits.cpuMs) {
          return fail('timeout', limitMessages.cpu(limits))
        }
        // active time grows no faster than the clock, so nothing can be over budget before then
        cpuTimer = setTimeout(checkCpu, Math.max(1, limits.cpuMs - active))
      }

      slot.inbox.on('message', onMessage)
      worker.on('error', onError)
      worker.on('exit', onExit)
      request.signal.addEventListener('abort', onAbort, { once: true })
      this.running.add(stop)
      worker.ref()
      cpuTimer = setTimeout(checkCpu, limits.cpuMs)
      wallTimer = setTimeout(() => fail('timeout', limitMessages.wall(limits)), limits.wallMs)
      worker.postMessage({
        t: 'run',
        id,
        source: wrapProgram(request.code),
        tools: request.tools,
        outputBytes: limits.outputBytes,
        bufferBytes: limits.memoryMb * 1024 * 1024,
        argumentBytes: argumentBytes(limits),
        maxPendingCalls,
      })
    })
  }

  private async acquire(memoryMb: number, signal: AbortSignal): Promise<Slot | undefined> {
    let pending: Promise<Slot>
    const pooled = memoryMb === this.limits.memoryMb
    const ready = pooled ? this.idle.pop() : undefined
    if (ready) return ready
    const spawn = pooled ? this.spawns.find((spawn) => !spawn.claimed) : undefined
    if (spawn) {
      spawn.claimed = true
      pending = spawn.slot
    } else {
      pending = this.spawn(memoryMb)
    }
    this.fill()
    let onAbort!: () => void
    const aborted = new Promise<undefined>((resolve) => signal.addEventListener('abort', (onAbort = () => resolve(undefined)), { once: true }))
    try {
      const slot = await Promise.race([pending, aborted])
      if (slot === undefined)
        void pending.then(
          (slot) => this.release(slot),
          () => {},
        )
      return slot
    } finally {
      signal.removeEventListener('abort', onAbort)
    }
  }

  private release(slot: Slot) {
    slot.worker.unref()
    const waiting = this.spawns.filter((spawn) => !spawn.claimed).length
    if (this.closed || slot.memoryMb !== this.limits.memoryMb || this.idle.length + waiting >= this.poolSize) void slot.worker.terminate()
    else this.idle.push(slot)
  }

  private discard(slot: Slot) {
    void slot.worker.terminate()
    this.fill()
  }

  // keeps `poolSize` workers spawned, in the background and one at a time: concurrent spawns slow each other
  // down on a small machine, and the first run of a process waits for the first worker
  private fill() {
    if (this.spawnFailed || this.closed || this.spawns.length > 0 || this.idle.length >= this.poolSize) return this.answerWaiters()
    const spawn: Spawn = { slot: this.spawn(this.limits.memoryMb).then((slot) => this.warm(slot)), claimed: false }
    this.spawns.push(spawn)
    spawn.slot.then(
      (slot) => {
        this.spawns.splice(this.spawns.indexOf(spawn), 1)
        if (!spawn.claimed) this.release(slot)
        this.fill()
      },
      () => {
        this.spawns.splice(this.spawns.indexOf(spawn), 1)
        // a failing spawn is not retried in a loop; the next run spawns on demand and reports the error
        if (spawn.claimed) this.fill()
        else this.spawnFailed = true
        this.answerWaiters()
      },
    )
  }

  private spawn(memoryMb: number) {
    const handoff = new SharedArrayBuffer(16)
    const { port1: replies, port2 } = new MessageChannel()
    const { port1: inbox, port2: toHost } = new MessageChannel()
    const worker = new Worker(entry, {
      env: {},
      argv: [],
      // the import() callback in worker.mjs is only consulted with this flag
      execArgv: ['--experimental-vm-modules'],
      workerData: { prelude: preludeSource, replies: port2, toHost, handoff, spinMs: this.spinMs },
      transferList: [port2, toHost],
      // the program's memoryMb on top of what the worker itself holds, so a program gets all of it
      resourceLimits: {
        maxOldGenerationSizeMb: memoryMb + overheadMb,
        maxYoungGenerationSizeMb: Math.max(1, Math.floor(memoryMb / 8)),
        stackSizeMb: 4,
      },
      // whatever the worker's thread writes (node's own warnings included) is read here and dropped: the host's
      // stdout may carry a protocol (MCP over stdio)
      stdout: true,
      stderr: true,
    })
    worker.stdout.resume()
    worker.stderr.resume()
    worker.unref()
    // a worker can still fail after its run settled (out of memory while being terminated): never throw in the host
    worker.on('error', () => {})
    const slot: Slot = { worker, memoryMb, runs: 0, replies, inbox, seq: new Int32Array(handoff, 0, 2), gapMs: 0, waited: new Float64Array(handoff, 8, 1) }
    // an idle worker that dies leaves the pool
    worker.once('exit', () => {
      replies.close()
      inbox.close()
      const index = this.idle.indexOf(slot)
      if (index === -1) return
      this.idle.splice(index, 1)
      this.fill()
    })
    return new Promise<Slot>((resolve, reject) => {
      const onMessage = (message: Message) => {
        if (message.t !== 'ready') return
        done()
        this.spawnFailed = false
        resolve(slot)
      }
      const onError = (error: Error) => {
        done()
        reject(error)
      }
      const onExit = (code: number) => {
        done()
        reject(new Error(`the sandbox worker exited with code ${code} while starting`))
      }
      const done = () => {
        worker.off('message', onMessage)
        worker.off('error', onError)
        worker.off('exit', onExit)
      }
      worker.on('message', onMessage)
      worker.on('error', onError)
      worker.on('exit', onExit)
    })
  }
}
