import { argumentBytes, limitMessages, maxPendingCalls, messageOf, overheadMb } from '@faber/sandbox/outcome'
import { hostCallback, type PoolOptions, type Run, SandboxPool } from '@faber/sandbox/pool'
import { preludeSource, wrapProgram } from '@faber/sandbox/prelude'
import ivm from 'isolated-vm'
import type { CodeRunOutcome } from './types.ts'
import { Watchdog } from './watchdog.ts'

export interface IsolateSandboxOptions extends Omit<PoolOptions, 'maxRuns'> {
  /** runs an isolate serves before it is replaced (default 200); it is replaced sooner once its heap is half full */
  maxRunsPerIsolate?: number
  /**
   * the thread that makes the sandbox may be lost: its process is one the host survives (the sandbox process of the
   * process tier sets it). a program is then driven from that thread after its first tool call, a reply entering it
   * synchronously, which saves a thread hand-off per call; but V8's out-of-memory handler parks the thread running an
   * isolate for good, and that would be this one. otherwise (the default) every stretch of a program runs on the
   * isolate's own thread, replies delivered asynchronously. never set it in a host
   */
  disposableThread?: boolean
  /**
   * with `disposableThread`: how long a program may compute at once on that thread after a tool call (a program that
   * passes it ends with `timeout`). by default only its cpuMs and wallMs bound it
   */
  sliceMs?: number
}

interface Slot {
  isolate: ivm.Isolate
  watch?: [generation: number, index: number]
  prelude: ivm.Script
  driver: ivm.Script
  outbox: Outbox
  memoryMb: number
  runs: number
  /** V8 ran out of memory outside the limit isolated-vm checks, and its handler parked the isolate's thread for good */
  parked?: boolean
  /** fails the run in progress when that happens */
  onParked?: () => void
}

const MB = 1024 * 1024

const syntaxLocation = /\s*\[program\.js:(\d+):(\d+)\]$/

// the outbox: shared memory where a program driven from the host's thread leaves its tool calls, read by the host once the
// step returned. `[records, units used]` as int32, then records of utf-16 units: `id & 0xffff, id >>> 16, tool index,
// argument length, argument…` (a call to a tool past the 65 536th takes the callback: its index does not fit)
const outboxUnits = 32 * 1024
const outboxRecordUnits = 4096

// run in each program's context around the prelude, before the program. on the isolate's own thread (the first stretch;
// every stretch unless the sandbox drives from its thread, replies then `post`ed) the bridge is an ignored callback.
// once a reply was `deliver`ed synchronously from the sandbox's thread, that thread drives the program: a call goes into
// the outbox, which costs no boundary crossing; a call with a long argument, or one that no longer fits, is a plain
// callback, and so is every later call of the step (they keep their order). the outbox is captured here, out of the
// program's reach, with the intrinsics it needs
const driverSource = `(function (onHost, offHost, outbox, setup, toolNamesJson, ...rest) {
  const header = new Int32Array(outbox, 0, 2)
  const units = new Uint16Array(outbox, 8)
  const charCodeAt = Function.prototype.call.bind(String.prototype.charCodeAt)
  const toolIndex = Object.create(null)
  const names = JSON.parse(toolNamesJson)
  for (let i = 0; i < names.length; i++) toolIndex[names[i]] = i
  let host = false
  let spilled = false
  const queue = (id, name, json) => {
    const tool = toolIndex[name]
    let at = header[1]
    const length = typeof json === 'string' ? json.length : Infinity
    if (spilled || !(tool <= 0xffff) || !(id >= 0 && id <= 0xffffffff) || length > ${outboxRecordUnits} || at + 4 + length > units.length) {
      spilled = true
      return false
    }
    units[at++] = id & 0xffff
    units[at++] = id >>> 16
    units[at++] = tool
    units[at++] = length
    for (let i = 0; i < length; i++) units[at++] = charCodeAt(json, i)
    header[1] = at
    header[0]++
    return true
  }
  let ended
  const end = new Promise((resolve) => { ended = resolve })
  const api = setup((kind, a, b, c) => {
    const answer = host ? (kind === 'call' && queue(a, b, c)) || onHost(kind, a, b, c) : offHost(kind, a, b, c)
    if (kind === 'done' || kind === 'throw') ended()
    return answer
  }, toolNamesJson, ...rest)
  const { start, deliver } = api
  return {
    start: (main) => { start(main) },
    begin: (main) => { start(main); return end },
    deliver: (call, ok, text, code) => { host = true; spilled = false; deliver(call, ok, text, code) },
    post: (call, ok, text, code) => { deliver(call, ok, text, code) },
  }
})`

/** a slot's outbox, seen from the host */
class Outbox {
  readonly memory = new SharedArrayBuffer(8 + 2 * outboxUnits)
  private header = new Int32Array(this.memory, 0, 2)
  private units = new Uint16Array(this.memory, 8)
  private text = Buffer.from(this.memory, 8)

  clear() {
    this.header[0] = 0
    this.header[1] = 0
  }

  /**
   * hands each call the program left to `call`, in order, and empties the outbox; false when a record is malformed.
   * `call` must not enter the program (that would write the outbox while it is read)
   */
  take(tools: readonly string[], call: (id: number, name: string, json: string) => void) {
    const { header, units, text } = this
    const records = header[0]
    const used = Math.min(header[1], units.length)
    this.clear()
    for (let k = 0, at = 0; k < records; k++) {
      if (at + 4 > used) return false
      const id = units[at] + units[at + 1] * 0x10000
      const name = tools[units[at + 2]]
      const end = at + 4 + units[at + 3]
      if (name === undefined || end > used) return false
      call(id, name, text.toString('utf16le', 2 * (at + 4), 2 * end))
      at = end
    }
    return true
  }
}

/** how long the host drives programs without letting its event loop turn (timers, I/O, aborts, other sessions) */
const driveMs = 10

const sliceMessage = (sliceMs: number) =>
  `the program computed for more than ${sliceMs} ms at once after a tool call returned (sliceMs): between tool calls programs run on the host's thread; compute in smaller steps or before the first tool call`

/**
 * a CodeRuntime on isolated-vm: each run gets a fresh context on a warm isolate, one run per isolate at a time.
 * an isolate that hit a limit, was aborted or misbehaved is disposed and replaced, never reused.
 */
export class IsolateSandbox extends SandboxPool<Slot> {
  readonly backend = 'isolated-vm'
  readonly maxRunsPerIsolate: number
  /** programs are driven from the thread that made the sandbox after their first tool call (see the option) */
  readonly hostDrive: boolean
  readonly sliceMs: number
  // every isolate this sandbox made that is not disposed: the watchdog may have to end a step in any of them
  private live = new Set<Slot>()
  private watchdog = new Watchdog(() => this.live)
  /** isolates whose thread V8's out-of-memory handler parked: their memory is lost, and the process cannot exit but by a signal */
  parked = 0
  protected readonly createFailure = 'could not create an isolate'

  constructor(options: IsolateSandboxOptions = {}) {
    super({ ...options, maxRuns: options.maxRunsPerIsolate })
    this.maxRunsPerIsolate = this.maxRuns
    this.hostDrive = options.disposableThread === true
    this.sliceMs = options.sliceMs ?? Number.POSITIVE_INFINITY
  }

  protected start(slot: Slot, run: Run) {
    const { isolate } = slot
    const { request, limits, bridge, fail, stop } = run
    let settled = false
    // what the program reported; it stands once the isolate is idle (nothing of the program still queued)
    let reported: CodeRunOutcome | undefined
    // the first stretch (script and start) runs on the isolate's own thread; under hostDrive every later one on this thread
    let busy = true
    let stepping = false
    // the host is delivering replies and dispatching calls: a reply that comes meanwhile waits its turn in the inbox
    let driving = false
    // the drive paused to let the host's event loop turn
    let paused = false
    // since when the host drives without its event loop having turned, or -1
    let driveStart = -1
    // calls that came through the callback during a step, dispatched once it returned; replies waiting to be delivered
    const spilled: [number, string, string][] = []
    const inbox: unknown[][] = []
    let context: ivm.Context | undefined
    let deliver: ivm.Reference | undefined
    let post: ivm.Reference | undefined
    let cpuStart = 0n
    const startedAt = performance.now()
    // every handle into the isolate this run made: kept, they keep the run's context alive in the warm isolate
    const handles: { release(): void }[] = []
    const hold = <T extends { release(): void }>(handle: T) => {
      handles.push(handle)
      return handle
    }
    const finish = (outcome: CodeRunOutcome, healthy: boolean) => run.finish(outcome, healthy ? this.heap(slot) : undefined)
    run.cleanup = (reuse) => {
      settled = true
      slot.onParked = undefined
      if (reuse) for (const handle of handles) handle.release()
    }
    run.deliver = (call, reply) => answer(reply.ok ? [call, true, reply.value] : [call, false, reply.message, reply.code])

    const report = (outcome: CodeRunOutcome) => {
      reported = outcome
      if (!busy && !stepping) finish(outcome, true)
    }

    // under hostDrive a reply enters the program synchronously, on this thread: the program runs until it next waits on
    // a tool. otherwise it is queued to the isolate's own thread, and the host goes on at once
    const answer = (args: unknown[]) => {
      if (!this.hostDrive) {
        // once the program reported, nothing of it may run on: the run is about to end
        // ignored: an isolate disposed meanwhile (its memory limit) is heard from the program's pending end (begin)
        if (!settled && reported === undefined) post!.applyIgnored(undefined, args)
        return
      }
      inbox.push(args)
      if (!busy && !driving && !paused) drive()
    }

    const turned = () => {
      driveStart = -1
    }
    const resume = () => {
      paused = false
      drive()
    }
    // replies that come at once (in a microtask) would keep the host's event loop from turning until the run ends: after
    // driveMs without a turn, the rest waits for the next one
    const drive = () => {
      driving = true
      while (inbox.length > 0 && !settled) {
        const now = performance.now()
        if (driveStart < 0) {
          driveStart = now
          setImmediate(turned)
        } else if (now - driveStart > driveMs) {
          paused = true
          setImmediate(resume)
          break
        }
        step(inbox.shift()!, now)
      }
      driving = false
    }

    const step = (args: unknown[], now: number) => {
      const cpuLeft = limits.cpuMs - Number(isolate.cpuTime - cpuStart) / 1e6
      const wallLeft = limits.wallMs - (now - startedAt)
      if (cpuLeft <= 0) return fail('timeout', limitMessages.cpu(limits))
      if (wallLeft <= 0) return fail('timeout', limitMessages.wall(limits))
      const bound = Math.min(cpuLeft, wallLeft, this.sliceMs)
      const overrun = () => {
        if (bound === cpuLeft) return fail('timeout', limitMessages.cpu(limits))
        if (bound === wallLeft) return fail('timeout', limitMessages.wall(limits))
        return fail('timeout', sliceMessage(this.sliceMs))
      }
      stepping = true
      try {
        // the watchdog bounds the step; isolated-vm's timeout only until it watches this isolate (see watchdog.ts)
        const inTime = this.watchdog.run(slot, bound, () => deliver!.applySync(undefined, args))
        if (inTime === false) {
          stepping = false
          return overrun()
        }
        if (inTime === undefined) deliver!.applySync(undefined, args, { timeout: Math.max(1, Math.ceil(bound)) })
      } catch (error) {
        stepping = false
        if (settled) return
        if (isolate.isDisposed || !/timed out/.test(messageOf(error))) return onRejected(error)
        return overrun()
      }
      stepping = false
      idle()
    }

    // the isolate ran everything it had queued: dispatch what the program asked for (the outbox first: those calls came
    // first), or end with what it reported. a reply the pipeline gives at once waits in the inbox (driving)
    const idle = () => {
      if (settled) return
      if (reported) return finish(reported, true)
      if (!slot.outbox.take(request.tools, dispatch)) return fail('crash', "the program's outbox was malformed")
      for (const [call, name, json] of spilled.splice(0)) dispatch(call, name, json)
    }
    const dispatch = (call: number, name: string, json: string) => {
      if (!settled) bridge.call(call, name, json)
    }

    const onBridge = hostCallback(run, {
      ended: () => settled || reported !== undefined,
      call: (call, name, json) => {
        // the pipeline runs once the step returned, not inside it: it would spend the program's slice
        if (stepping) spilled.push([call, name, json])
        else bridge.call(call, name, json)
      },
      report,
    })
    // the program's only way out. on this thread (hostDrive) it is a plain call; from the isolate's thread an ignored
    // callback, so the program never waits on the host's thread
    const onHost = new ivm.Callback(onBridge, { sync: true })
    const offHost = new ivm.Callback((kind: unknown, a: unknown, b: unknown, c: unknown) => void onBridge(kind, a, b, c), { ignored: true })

    const onRejected = (error: unknown) => {
      if (settled) return
      const message = messageOf(error)
      // nothing but its memory limit disposes an isolate behind our back (an await leaves only "abandoned" to hear)
      if (/memory limit/.test(message) || isolate.isDisposed) fail('memory', limitMessages.memory(limits))
      else stop({ ok: false, kind: 'exception', message: error instanceof Error ? `${error.name}: ${message}` : message, logs: bridge.logs })
    }

    let script: ivm.Script
    let start: ivm.Reference
    const source = wrapProgram(request.code)
    try {
      context = hold(isolate.createContextSync())
      const setup = hold(slot.prelude.runSync(context, { reference: true }))
      slot.outbox.clear()
      const args = [
        onHost,
        offHost,
        new ivm.ExternalCopy(slot.outbox.memory).copyInto({ release: true }),
        setup.derefInto(),
        JSON.stringify(request.tools),
        limits.outputBytes,
        limits.memoryMb * MB,
        argumentBytes(limits),
        maxPendingCalls,
        source,
      ]
      const driver = hold(slot.driver.runSync(context, { reference: true }))
      const api: ivm.Reference<any> = hold(driver.applySync(undefined, args, { result: { reference: true } }))
      // without hostDrive the program's whole run is its first stretch: `begin` resolves once it reported its end, and
      // rejects once its isolate was disposed (its memory limit, while it computed or awaited a reply)
      start = hold(api.getSync(this.hostDrive ? 'start' : 'begin', { reference: true }))
      if (this.hostDrive) deliver = hold(api.getSync('deliver', { reference: true }))
      else post = hold(api.getSync('post', { reference: true }))
    } catch (error) {
      return fail('crash', `could not prepare the isolate: ${messageOf(error)}`)
    }
    try {
      script = hold(isolate.compileScriptSync(source, { filename: 'program.js', lineOffset: -1 }))
    } catch (error) {
      const text = messageOf(error)
      const match = syntaxLocation.exec(text)
      const at = match ? { line: Number(match[1]), column: Number(match[2]) } : {}
      const where = match ? ` (line ${match[1]}, column ${match[2]})` : ''
      return finish({ ok: false, kind: 'exception', message: `SyntaxError: ${text.replace(syntaxLocation, '')}${where}`, logs: bridge.logs, ...at }, true)
    }

    slot.onParked = () => fail('memory', `${limitMessages.memory(limits)}: V8 ran out of memory outside the isolate's limit`)
    cpuStart = isolate.cpuTime
    run.arm(() => {
      try {
        return Number(isolate.cpuTime - cpuStart) / 1e6
      } catch {}
    })
    // the first stretch runs on the isolate's thread, under the cpu timer: a program that computes before its first
    // tool call must not hold the host's thread. evaluating `0` after it confirms the isolate ran its microtasks
    script
      .run(context, { reference: true })
      .then((main) => start.apply(undefined, [hold(main).derefInto()], this.hostDrive ? {} : { result: { promise: true } }))
      .then(() => context!.eval('0'))
      .then(() => {
        busy = false
        if (settled) return
        if (reported) return finish(reported, true)
        if (this.hostDrive) drive()
      }, onRejected)
  }

  protected create(memoryMb: number): Slot {
    const slot: Slot = { memoryMb, runs: 0 } as Slot
    // without this handler such an out-of-memory aborts the whole process; with it isolated-vm parks the isolate's
    // thread for good instead, and the isolate is abandoned (never disposed: its thread still holds it)
    const onCatastrophicError = () => {
      this.parked++
      slot.parked = true
      slot.onParked?.()
    }
    // the program's memoryMb on top of what the prelude and a fresh context take
    slot.isolate = new ivm.Isolate({ memoryLimit: memoryMb + overheadMb, onCatastrophicError })
    slot.prelude = slot.isolate.compileScriptSync(preludeSource, { filename: 'faber-prelude.js' })
    slot.driver = slot.isolate.compileScriptSync(driverSource, { filename: 'faber-driver.js' })
    slot.outbox = new Outbox()
    this.live.add(slot)
    this.watchdog.changed()
    return slot
  }

  protected dispose(slot: Slot) {
    this.live.delete(slot)
    // disposing from inside a step (a bridge callback) ends the program's execution at once. a parked isolate is
    // abandoned, never disposed: its thread still holds it
    if (!slot.parked && !slot.isolate.isDisposed) slot.isolate.dispose()
  }

  override async close() {
    await super.close()
    this.watchdog.close()
  }

  // what the isolate's heap holds after a clean run, or undefined when it may not serve another
  private heap(slot: Slot) {
    if (slot.parked || slot.isolate.isDisposed) return undefined
    try {
      return slot.isolate.getHeapStatisticsSync().used_heap_size
    } catch {
      return undefined
    }
  }
}
