import { readFileSync } from 'node:fs'
import type { BridgeReply } from '@faber/core/code-runtime'
import {
  argumentBytes,
  type Backoff,
  backoff,
  burst,
  callsSource,
  handoffBytes,
  handoffCounts,
  handoffTally,
  type LaneCounts,
  lane,
  laneSource,
  limitMessages,
  maxPendingCalls,
  messageOf,
  overheadMb,
  type PoolOptions,
  type Program,
  type ProgramHandle,
  type ProgramReports,
  preludeSource,
  report,
  runsActive,
  type SandboxDriver,
  SandboxPool,
  type Unit,
} from '@faber/sandbox/contract'
import ivm from 'isolated-vm'

export interface IsolateSandboxOptions extends Omit<PoolOptions, 'maxRuns'> {
  /** runs an isolate serves before it is replaced (default 200); it is replaced sooner once its heap is half full */
  maxRunsPerIsolate?: number
  /**
   * the longest either side of a nested call spins for the other's answer before it sleeps (default 0.05; 0 never spins),
   * as WorkerSandboxOptions.spinMs. the isolate's spin counts towards the program's cpuMs (README)
   */
  spinMs?: number
}

interface Slot extends Unit {
  isolate: ivm.Isolate
  prelude: ivm.Script
  driver: ivm.Reference
  /** the hand-off's shared memory (lane.mjs) and its back-off */
  handoff: SharedArrayBuffer
  pair: Backoff
  /** V8 ran out of memory outside isolated-vm's limit, and its handler parked the isolate's thread for good */
  parked?: boolean
  /** fails the run in progress when that happens: set while a run is in progress */
  onParked?: () => void
  /** the next run's fresh context, made after the last run ended (~0.9 ms of the host's thread a run spares) */
  next?: ivm.Context
}

const none = () => undefined

const syntaxLocation = /\s*\[program\.js:(\d+):(\d+)\]$/

const driverSource = readFileSync(new URL('./driver-script.js', import.meta.url), 'utf8')

// the isolate has no clock finer than Date.now(): its spin is bounded by turns of its loop, as many as this thread makes
// in a millisecond of a loop of the same shape. measured as each of the first `calibrations` isolates is made, keeping
// the most seen: a measure taken unoptimized or off-core counted 7 600 turns against 20 000 (load 3), and spins ended
// before most replies came. only the first few: up to a millisecond of the host's thread each
let turnsPerMs = 0
let calibrated = 0
const calibrations = 8
const calibrate = () => {
  if (calibrated++ >= calibrations) return
  const h = new Int32Array(new SharedArrayBuffer(16))
  const turn = (turns: number) => {
    let n = turns
    while (n > 0 && Atomics.load(h, 0) === 0 && Atomics.load(h, 1) === Atomics.load(h, 2)) n--
    return n
  }
  // about a millisecond in all at most, the fastest round
  for (let round = 0; round < 6; round++) {
    const started = performance.now()
    turn(5000)
    turnsPerMs = Math.max(turnsPerMs, 5000 / (performance.now() - started))
  }
}

/** a CodeRuntime on isolated-vm (IsolateDriver) */
export class IsolateSandbox extends SandboxPool<Slot> {
  declare protected readonly driver: IsolateDriver

  constructor(options: IsolateSandboxOptions = {}) {
    super(new IsolateDriver(options), { ...options, maxRuns: options.maxRunsPerIsolate })
  }

  get spinMs() {
    return this.driver.spinMs
  }

  /** isolates whose thread V8's out-of-memory handler parked: their memory is lost, and the process cannot exit but by a signal */
  get parked() {
    return this.driver.parked
  }

  /** what the hand-off did so far over this sandbox's isolates, as WorkerSandbox.handoffStats (`port`: a callback or a posted task) */
  handoffStats(): { calls: LaneCounts; replies: LaneCounts } {
    return this.driver.handoffs.stats()
  }
}

/**
 * the isolated-vm backend (contract.ts): a unit is an isolate, each program a fresh context in it, run on the isolate's
 * own thread from start to end (a thread of isolated-vm's pool: never the thread that made it)
 */
export class IsolateDriver implements SandboxDriver<Slot> {
  readonly backend = 'isolated-vm'
  readonly createFailure = 'could not create an isolate'
  readonly spinMs: number
  readonly handoffs = handoffTally()
  parked = 0

  constructor(options: IsolateSandboxOptions) {
    this.spinMs = options.spinMs ?? 0.05
  }

  start(slot: Slot, { request, limits, source }: Program, reports: ProgramReports): ProgramHandle {
    const { isolate } = slot
    const fail = reports.failed
    // `reported`: the program's done or throw, which stands once the isolate is idle; `busy`: the run's task (`begin`) has
    // not settled on the isolate's thread; `waiting`: calls not answered
    const run = { reported: undefined as [kind: unknown, a: unknown, b: unknown, c: unknown] | undefined, busy: true, waiting: 0 }
    // released after the run: kept, they keep its context alive in the warm isolate
    const handles: { release(): void }[] = []
    const hold = <T extends { release(): void }>(handle: T) => {
      handles.push(handle)
      return handle
    }
    Atomics.add(runsActive, 0, 1)
    const end = (reuse: boolean) => {
      slot.onParked = undefined
      Atomics.sub(runsActive, 0, 1)
      if (!reuse) return
      for (const handle of handles) handle.release()
      // the next run's context, made on a turn of the event loop after this one
      setImmediate(() => {
        if (slot.onParked || slot.next || slot.parked || isolate.isDisposed) return
        try {
          slot.next = isolate.createContextSync()
        } catch {}
      })
    }

    // the last call taken and when; calls taken; ms the isolate spun for replies that came while it did; its spins that
    // caught nothing before the run
    let lastCall = -1
    let lastCallAt = 0
    let taken = 0
    let waited = 0
    const missedBefore = handoffCounts(slot.handoff)[1].missed
    const finish = () => report(reports, ...run.reported!, this.heap(slot))
    const held: ProgramReports = {
      ...reports,
      ended: () => reports.ended() || run.reported !== undefined,
      call: (call, name, json, site) => {
        run.waiting++
        lastCall = call
        lastCallAt = performance.now()
        taken++
        reports.call(call, name, json, site)
      },
    }
    const onBridge = (kind: unknown, a: unknown, b: unknown, c: unknown, d?: unknown) => {
      if (kind !== 'done' && kind !== 'throw') return report(held, kind, a, b, c, d)
      if (held.ended()) return false
      run.reported = [kind, a, b, c]
      if (!run.busy) finish()
      return true
    }
    // lane 0 the program's calls, lane 1 the replies. the ring is the program's: anything malformed there ends the run
    const malformed = () => fail('crash', "the program's hand-off ring was malformed")
    const calls = lane(slot.handoff, 0, { postMessage: none }, { receive: none, malformed })
    // ignored: an isolate disposed meanwhile (its memory limit) is heard from the program's pending end (begin)
    let post: ivm.Reference | undefined
    const toIsolate = (message: unknown) => post!.applyIgnored(undefined, Array.isArray(message) ? message : [message])
    const replies = lane(slot.handoff, 1, { postMessage: toIsolate }, { receive: none })
    calls.clear()
    replies.clear()
    // a call through the ring (`id:site:name length:name json`), or the callback's arguments
    const onMessage = (message: unknown) => {
      if (reports.ended()) return
      if (Array.isArray(message)) return void onBridge(message[0], message[1], message[2], message[3], message[4])
      const text = message as string
      const first = text.indexOf(':')
      const second = first < 0 ? -1 : text.indexOf(':', first + 1)
      const third = second < 0 ? -1 : text.indexOf(':', second + 1)
      const name = third + 1 + Number(text.slice(second + 1, third))
      if (third < 0 || !(name > third && name <= text.length)) return malformed()
      onBridge('call', Number(text.slice(0, first)), text.slice(third + 1, name), text.slice(name), Number(text.slice(first + 1, second)))
    }
    // the way out from the isolate's thread, which never waits on this one (lane 0's port: 0 rings for the ring)
    const offHost = new ivm.Callback(
      (kind: unknown, a: unknown, b: unknown, c: unknown, d: unknown) => {
        if (!reports.ended()) calls.port(kind === 0 ? 0 : [kind, a, b, c, d], onMessage)
      },
      { ignored: true },
    )

    // isolated-vm ends a task with the first rejection the program left unhandled in it (the worker and QuickJS ignore
    // them): that task still ran to its end, so only the isolate's own end counts
    const fatal = (error: unknown) => isolate.isDisposed || /memory limit/.test(messageOf(error))
    const tolerate = (error: unknown) => {
      if (fatal(error)) throw error
    }
    const onRejected = (error: unknown) => {
      if (reports.ended()) return
      // nothing but its memory limit disposes an isolate behind our back (an await leaves only "abandoned" to hear)
      if (fatal(error)) fail('memory', limitMessages.memory(limits))
      else reports.threw(error instanceof Error ? `${error.name}: ${messageOf(error)}` : messageOf(error))
    }

    // whether to spin for the next call after a reply: 0 no, 1 at once, 2 once the event loop turned (after a burst: the
    // isolate may go on spinning meanwhile, its call waiting in the ring)
    const within = burst()
    const expect = () => {
      if (!(this.spinMs > 0) || reports.ended() || run.waiting > 0 || Atomics.load(runsActive, 0) > 1 || !slot.pair.may(1)) return 0
      return within() ? 1 : 2
    }
    // a flood is taken 64 calls at a time, a turn of the event loop between (nothing rings for what is left)
    const drain = () => {
      const count = reports.ended() ? 0 : calls.take(onMessage, 64)
      if (count === 64) setImmediate(drain)
      return count
    }
    // a spin caught something only if the ring brought it: what the callback brings waits for the event loop anyway
    const spin = () => {
      if (!reports.ended()) slot.pair.spun(calls.spin(this.spinMs) && drain() > 0)
    }
    // a reply is posted to the isolate's thread; after one, this thread may spin a moment for the next call (the hand-off)
    const deliver = (call: number, reply: BridgeReply) => {
      run.waiting--
      if (held.ended()) return
      const spins = expect()
      // marked first: the isolate, spinning, may take the reply and call again before `offer` returns
      if (spins) calls.watch()
      // through the ring while the isolate spins for it: since the call it waited on this thread, not the program's cpu
      if (reply.ok && replies.offer(`${call}:${reply.value}`)) {
        if (call === lastCall) waited += Math.min(performance.now() - lastCallAt, this.spinMs)
      } else {
        // else posted. a post can hold this thread while the isolate runs: a call made meanwhile takes the ring, found
        // once this thread spins, but the isolate does not spin for its reply (marked 2), which could not come in time
        if (spins) calls.watch(2)
        replies.send(reply.ok ? `${call}:${reply.value}` : [call, false, reply.message, reply.code])
      }
      if (spins === 1) spin()
      else if (spins === 2) setImmediate(spin)
    }

    let context: ivm.Context
    let api: ivm.Reference<any>
    let begin: ivm.Reference
    try {
      slot.onParked = () => fail('memory', `${limitMessages.memory(limits)}: V8 ran out of memory outside the isolate's limit`)
      context = hold(slot.next ?? isolate.createContextSync())
      slot.next = undefined
      const setup = hold(slot.prelude.runSync(context, { reference: true }))
      const args = [
        offHost,
        new ivm.ExternalCopy(slot.handoff).copyInto({ release: true }),
        new ivm.ExternalCopy(runsActive.buffer).copyInto({ release: true }),
        // spinMs in turns: measured when the slot was made
        this.spinMs > 0 ? Math.max(1, Math.round(this.spinMs * turnsPerMs)) : 0,
        setup.derefInto(),
        request.values && JSON.stringify(request.values.replay),
        JSON.stringify(request.tools),
        limits.outputBytes,
        limits.memoryMb * 1024 * 1024,
        argumentBytes(limits),
        maxPendingCalls,
      ]
      api = hold(slot.driver.applySync(undefined, args, { result: { reference: true } }))
      // the whole run is one task of the isolate: `begin` settles with the program's end, or its isolate's disposal
      begin = hold(api.getSync('begin', { reference: true }))
      post = hold(api.getSync('post', { reference: true }))
    } catch (error) {
      fail('crash', `could not prepare the isolate: ${messageOf(error)}`)
      return { deliver: none, cpuUsed: none, end }
    }
    let script: ivm.Script
    try {
      script = hold(isolate.compileScriptSync(source, { filename: 'program.js', lineOffset: -1 }))
    } catch (error) {
      const text = messageOf(error)
      const match = syntaxLocation.exec(text)
      const where = match ? ` (line ${match[1]}, column ${match[2]})` : ''
      reports.threw(`SyntaxError: ${text.replace(syntaxLocation, '')}${where}`, match ? +match[1] : undefined, match ? +match[2] : undefined, this.heap(slot))
      return { deliver: none, cpuUsed: none, end }
    }

    const cpuStart = isolate.cpuTime
    // the program runs on the isolate's thread: it never holds the host's. evaluating `0` after it confirms the isolate
    // ran its microtasks (a task that left a rejection unhandled took the wait for the end with it: waited for again)
    const ended = (): Promise<unknown> =>
      hold(api.getSync('ended', { reference: true }))
        .apply(undefined, [], { result: { promise: true } })
        .catch((error) => {
          tolerate(error)
          return ended()
        })
    script
      .run(context, { reference: true })
      .then((main) =>
        begin.apply(undefined, [hold(main).derefInto()], { result: { promise: true } }).catch((error) => {
          tolerate(error)
          return ended()
        }),
      )
      .then(() => context.eval('0').catch(tolerate))
      .then(() => {
        run.busy = false
        if (!reports.ended() && run.reported) finish()
      }, onRejected)
    return {
      deliver,
      // the isolate's cpu time less its spins: those that caught a reply (waited), and spinMs for each that caught nothing
      // (at most one a call)
      cpuUsed: () => {
        try {
          const missed = Math.min(Math.max(0, handoffCounts(slot.handoff)[1].missed - missedBefore), taken)
          return Number(isolate.cpuTime - cpuStart) / 1e6 - waited - missed * this.spinMs
        } catch {}
      },
      end,
    }
  }

  create(memoryMb: number): Slot {
    const slot: Slot = { memoryMb, runs: 0 } as Slot
    // without it such an out-of-memory aborts the process; with it isolated-vm parks the isolate's thread for good
    const onCatastrophicError = () => {
      this.parked++
      slot.parked = true
      slot.onParked?.()
    }
    // the program's memoryMb on top of what the prelude and a fresh context take
    slot.isolate = new ivm.Isolate({ memoryLimit: memoryMb + overheadMb, onCatastrophicError })
    // (here, off the runs' path, not as a service's context starts)
    if (this.spinMs > 0) calibrate()
    slot.prelude = slot.isolate.compileScriptSync(preludeSource, { filename: 'faber-prelude.js' })
    // the driver's context, once per isolate: calls-script.js there is every run's `shared`, lane-script.js the hand-off
    const own = slot.isolate.createContextSync()
    const [shared, lanes, driver] = [
      [callsSource, 'calls'],
      [laneSource, 'lane'],
      [driverSource, 'driver'],
    ].map(([source, name]) => slot.isolate.compileScriptSync(source, { filename: `faber-${name}.js` }).runSync(own, { reference: true }))
    slot.driver = driver.applySync(undefined, [shared.derefInto(), lanes.derefInto()], { result: { reference: true } })
    slot.handoff = new SharedArrayBuffer(handoffBytes)
    slot.pair = backoff(slot.handoff)
    this.handoffs.add(slot.handoff)
    return slot
  }

  dispose(slot: Slot) {
    this.handoffs.remove(slot.handoff)
    // this ends a program still running at once. a parked isolate's thread still holds it: abandoned
    if (!slot.parked && !slot.isolate.isDisposed) slot.isolate.dispose()
  }

  // what the isolate's heap holds after a clean run, or undefined when it may not serve another
  private heap(slot: Slot) {
    if (slot.parked || slot.isolate.isDisposed) return undefined
    try {
      return slot.isolate.getHeapStatisticsSync().used_heap_size
    } catch {}
  }
}
