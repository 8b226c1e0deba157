import { readFileSync } from 'node:fs'
import type { BridgeReply, CodeRunRequest } from '@faber/core/code-runtime'
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
import { Watchdog, type Watched } from './watchdog.ts'

export interface IsolateSandboxOptions extends Omit<PoolOptions, 'maxRuns'> {
  /** runs an isolate serves before it is replaced (default 200); it is replaced sooner once its heap is half full */
  maxRunsPerIsolate?: number
  /**
   * the thread that makes the sandbox may be lost (the process tier's sandbox process sets it): after its first tool call
   * a program is driven from that thread, replies entering synchronously, saving a thread hand-off per call; but V8's
   * out-of-memory handler would park this thread for good. never set it in a host
   */
  disposableThread?: boolean
  /** with `disposableThread`: how long a program may compute at once on that thread after a tool call (else `timeout`) */
  sliceMs?: number
  /**
   * with `disposableThread`: called with the run's request before a step of its program starts on that thread, so that
   * an out-of-memory that parks the thread in the step is blamed on that program (the sandbox process tells its host)
   */
  onStep?: (request: CodeRunRequest) => void
  /**
   * the longest either side of a nested call spins for the other's answer before it sleeps (default 0.05; 0 never spins),
   * as WorkerSandboxOptions.spinMs. the isolate's spin counts towards the program's cpuMs (README). not with `disposableThread`
   */
  spinMs?: number
}

interface Slot extends Unit, Watched {
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

/** how a run's replies enter the program: posted to the isolate's thread, or delivered on this one (hostDrive) */
interface Drive {
  deliver(call: number, reply: BridgeReply): void
  /** the program's first stretch returned, and it has not reported its end */
  ready?(): void
  took?(call: number): void
  /** ms of the isolate's cpu time that were its spins for replies, not the program's */
  spun?(): number
}

const none = () => undefined

const syntaxLocation = /\s*\[program\.js:(\d+):(\d+)\]$/

const driverSource = readFileSync(new URL('./driver-script.js', import.meta.url), 'utf8')

/** how long the host drives programs without letting its event loop turn (timers, I/O, aborts, other sessions) */
const driveMs = 10

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

const sliceMessage = (sliceMs: number) =>
  `the program computed for more than ${sliceMs} ms at once after a tool call returned (sliceMs): between tool calls programs run on the host's thread; compute in smaller steps or before the first tool call`

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

/** the isolated-vm backend (contract.ts): a unit is an isolate, each program a fresh context in it */
export class IsolateDriver implements SandboxDriver<Slot> {
  readonly backend = 'isolated-vm'
  readonly createFailure = 'could not create an isolate'
  readonly hostDrive: boolean
  readonly sliceMs: number
  private onStep: IsolateSandboxOptions['onStep']
  readonly spinMs: number
  readonly handoffs = handoffTally()
  // the watchdog may have to end a step in any isolate not disposed
  private live = new Set<Slot>()
  private watchdog = new Watchdog(() => this.live)
  parked = 0

  constructor(options: IsolateSandboxOptions) {
    this.hostDrive = options.disposableThread === true
    this.sliceMs = options.sliceMs ?? Number.POSITIVE_INFINITY
    this.onStep = this.hostDrive ? options.onStep : undefined
    this.spinMs = this.hostDrive ? 0 : (options.spinMs ?? 0.05)
  }

  close() {
    this.watchdog.close()
  }

  start(slot: Slot, { request, limits, source, wallLeft }: Program, reports: ProgramReports): ProgramHandle {
    const { isolate } = slot
    const fail = reports.failed
    // `reported`: the program's done or throw, which stands once the isolate is idle; `busy`: its first stretch runs on
    // the isolate's thread; `stepping`: a later one runs on this thread (hostDrive); `waiting`: calls not answered
    const run = { reported: undefined as [kind: unknown, a: unknown, b: unknown, c: unknown] | undefined, busy: true, stepping: false, waiting: 0 }
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

    // a call made during a step waits in `spilled` until the step returned (the pipeline would spend the program's slice)
    const finish = () => report(reports, ...run.reported!, this.heap(slot))
    const spilled: Parameters<ProgramReports['call']>[] = []
    const dispatch: ProgramReports['call'] = (call, name, json, site) => {
      if (reports.ended()) return
      run.waiting++
      drive.took?.(call)
      reports.call(call, name, json, site)
    }
    const held: ProgramReports = {
      ...reports,
      ended: () => reports.ended() || run.reported !== undefined,
      call: (...call) => (run.stepping ? void spilled.push(call) : dispatch(...call)),
    }
    const onBridge = (kind: unknown, a: unknown, b: unknown, c: unknown, d?: unknown) => {
      if (kind !== 'done' && kind !== 'throw') return report(held, kind, a, b, c, d)
      if (held.ended()) return false
      run.reported = [kind, a, b, c]
      if (!run.busy && !run.stepping) finish()
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
    // the way out from the isolate's thread never waits on this one (lane 0's port: 0 rings for the ring); from this
    // thread (hostDrive) a plain call
    const offHost = new ivm.Callback(
      (kind: unknown, a: unknown, b: unknown, c: unknown, d: unknown) => {
        if (!reports.ended()) calls.port(kind === 0 ? 0 : [kind, a, b, c, d], onMessage)
      },
      { ignored: true },
    )
    const onHost = new ivm.Callback(onBridge, { sync: true })

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

    // replies posted to the isolate's thread; after one, this thread may spin a moment for the next call (the hand-off)
    const onIsolate = (api: ivm.Reference): Drive => {
      post = hold(api.getSync('post', { reference: true }))
      // ms the isolate spun for replies that came while it did; its spins that caught nothing before the run
      let lastCall = -1
      let lastCallAt = 0
      let taken = 0
      let waited = 0
      const missedBefore = handoffCounts(slot.handoff)[1].missed
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
      return {
        deliver: (call, reply) => {
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
        },
        took: (call) => {
          lastCall = call
          lastCallAt = performance.now()
          taken++
        },
        // spins that caught a reply (waited), and spinMs for each that caught nothing (at most one a call)
        spun: () => waited + Math.min(Math.max(0, handoffCounts(slot.handoff)[1].missed - missedBefore), taken) * this.spinMs,
      }
    }

    // hostDrive: after the first stretch a reply enters the program on this thread, which runs it until it waits (a step)
    const fromHost = (api: ivm.Reference): Drive => {
      const deliver = hold(api.getSync('deliver', { reference: true }))
      const inbox: unknown[][] = []
      // delivering replies, or paused for the event loop to turn: a reply that comes meanwhile waits in the inbox
      let driving = false
      // after driveMs of replies in a row (each in a microtask), the rest waits for the event loop's next turn
      const within = burst(driveMs)
      const deliverAll = () => {
        driving = true
        while (inbox.length > 0 && !reports.ended()) {
          if (!within()) return void setImmediate(deliverAll)
          step(inbox.shift()!, performance.now())
        }
        driving = false
      }
      const step = (args: unknown[], now: number) => {
        const cpuLeft = limits.cpuMs - Number(isolate.cpuTime - cpuStart) / 1e6
        // Infinity while the program waits on a person: only cpuMs and the slice bound the step then
        const wallNow = wallLeft(now)
        if (cpuLeft <= 0) return fail('timeout', limitMessages.cpu(limits))
        if (wallNow <= 0) return fail('timeout', limitMessages.wall(limits))
        const bound = Math.min(cpuLeft, wallNow, this.sliceMs)
        const overrun = () =>
          fail('timeout', bound === cpuLeft ? limitMessages.cpu(limits) : bound === wallNow ? limitMessages.wall(limits) : sliceMessage(this.sliceMs))
        this.onStep?.(request)
        run.stepping = true
        try {
          // isolated-vm's timeout only until the watchdog watches this isolate (watchdog.ts)
          const inTime = this.watchdog.run(slot, bound, () => deliver.applySync(undefined, args))
          if (inTime === false) return overrun()
          if (inTime === undefined) deliver.applySync(undefined, args, { timeout: Math.max(1, Math.ceil(bound)) })
        } catch (error) {
          if (reports.ended()) return
          if (fatal(error)) return onRejected(error)
          if (/timed out/.test(messageOf(error))) return overrun()
          // else a rejection the program left unhandled: the step ran to its end
        } finally {
          run.stepping = false
        }
        idle()
      }
      const idle = () => {
        if (reports.ended()) return
        if (run.reported) return finish()
        for (const call of spilled.splice(0)) dispatch(...call)
      }
      return {
        deliver: (call, reply) => {
          inbox.push(reply.ok ? [call, true, reply.value] : [call, false, reply.message, reply.code])
          if (!run.busy && !driving) deliverAll()
        },
        ready: deliverAll,
      }
    }

    let context: ivm.Context
    let api: ivm.Reference<any>
    let start: ivm.Reference
    let drive: Drive
    try {
      slot.onParked = () => fail('memory', `${limitMessages.memory(limits)}: V8 ran out of memory outside the isolate's limit`)
      context = hold(slot.next ?? isolate.createContextSync())
      slot.next = undefined
      const setup = hold(slot.prelude.runSync(context, { reference: true }))
      const args = [
        onHost,
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
      // without hostDrive the whole run is its first stretch: `begin` settles with its end, or its isolate's disposal
      start = hold(api.getSync(this.hostDrive ? 'start' : 'begin', { reference: true }))
      drive = this.hostDrive ? fromHost(api) : onIsolate(api)
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
    // the first stretch runs on the isolate's thread: a program computing before its first call must not hold the host's.
    // evaluating `0` after it confirms the isolate ran its microtasks (a stretch that left a rejection unhandled took
    // the wait for the end with it: waited for again)
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
        start.apply(undefined, [hold(main).derefInto()], this.hostDrive ? {} : { result: { promise: true } }).catch((error) => {
          tolerate(error)
          if (!this.hostDrive) return ended()
        }),
      )
      .then(() => context.eval('0').catch(tolerate))
      .then(() => {
        run.busy = false
        if (reports.ended()) return
        if (run.reported) return finish()
        drive.ready?.()
      }, onRejected)
    return {
      deliver: (call, reply) => {
        run.waiting--
        drive.deliver(call, reply)
      },
      cpuUsed: () => {
        try {
          return Number(isolate.cpuTime - cpuStart) / 1e6 - (drive.spun?.() ?? 0)
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
    this.live.add(slot)
    this.watchdog.changed()
    return slot
  }

  dispose(slot: Slot) {
    this.live.delete(slot)
    this.handoffs.remove(slot.handoff)
    // from inside a step this ends the program at once. a parked isolate's thread still holds it: abandoned
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
