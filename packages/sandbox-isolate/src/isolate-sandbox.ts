import { defaultMaxConcurrent, Gate } from '@faber/sandbox/gate'
import { argumentBytes, boundReply, failure, limitMessages, maxPendingCalls, messageOf, Output, overheadMb } from '@faber/sandbox/outcome'
import { preludeSource, wrapProgram } from '@faber/sandbox/prelude'
import ivm from 'isolated-vm'
import {
  type BridgeReply,
  type CodeFailureKind,
  type CodeRunLimits,
  type CodeRunOutcome,
  type CodeRunRequest,
  type CodeRuntime,
  type CodeRuntimeLoad,
  defaultCodeLimits,
} from './types.ts'

export interface IsolateSandboxOptions {
  /** warm isolates kept waiting; overlapping runs beyond it get an isolate made on demand */
  poolSize?: number
  /** fills in any limit a request leaves out; `memoryMb` is also the memory limit of the pooled isolates */
  limits?: Partial<CodeRunLimits>
  /** programs running at once; runs beyond it wait in order (default: two per core, at least 2) */
  maxConcurrent?: number
  /** runs an isolate serves before it is replaced (default 200); it is replaced sooner once its heap is half full */
  maxRunsPerIsolate?: number
}

interface Slot {
  isolate: ivm.Isolate
  prelude: ivm.Script
  memoryMb: number
  runs: number
  /** V8 ran out of memory outside the limit isolated-vm checks, and its handler parked the isolate's thread for good */
  parked?: boolean
  /** fails the run in progress when that happens */
  onParked?: () => void
}

const MB = 1024 * 1024

const syntaxLocation = /\s*\[program\.js:(\d+):(\d+)\]$/

/**
 * a CodeRuntime on isolated-vm: each run gets a fresh context on a warm isolate, one run per isolate at a time.
 * an isolate that hit a limit, was aborted or misbehaved is disposed and replaced, never reused.
 */
export class IsolateSandbox implements CodeRuntime {
  readonly backend = 'isolated-vm'
  readonly poolSize: number
  readonly limits: CodeRunLimits
  readonly maxRunsPerIsolate: number
  /** isolates whose thread V8's out-of-memory handler parked: their memory is lost until the process ends */
  parked = 0
  private gate: Gate
  private idle: Slot[] = []
  private running = new Set<(outcome: CodeRunOutcome) => void>()
  private closed = false

  constructor(options: IsolateSandboxOptions = {}) {
    this.poolSize = options.poolSize ?? 2
    this.limits = { ...defaultCodeLimits, ...options.limits }
    this.maxRunsPerIsolate = options.maxRunsPerIsolate ?? 200
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
      let slot: Slot
      try {
        slot = (limits.memoryMb === this.limits.memoryMb && this.idle.pop()) || this.create(limits.memoryMb)
      } catch (error) {
        return failure('crash', `could not create an isolate: ${messageOf(error)}`)
      }
      return await this.execute(slot, request, limits)
    } finally {
      leave()
    }
  }

  load(): CodeRuntimeLoad {
    return this.gate.load()
  }

  /** disposes every isolate; runs in progress end with kind `abort` */
  async close() {
    this.closed = true
    this.gate.drain()
    for (const stop of [...this.running]) stop(failure('abort', 'the sandbox was closed during the run'))
    for (const slot of this.idle) slot.isolate.dispose()
    this.idle = []
  }

  private execute(slot: Slot, request: CodeRunRequest, limits: CodeRunLimits) {
    const { isolate } = slot
    const tools = new Set(request.tools)
    const output = new Output(limits.outputBytes)
    const { logs } = output
    let settled = false
    let reported = false
    let waiting = 0
    // what the calls waiting on the host hold there: the program's memoryMb bounds it as it bounds the sandbox
    let waitingBytes = 0
    let context: ivm.Context | undefined
    let deliver: ivm.Reference | undefined
    let cpuTimer: NodeJS.Timeout | undefined
    let wallTimer: NodeJS.Timeout | undefined
    // every handle into the isolate this run made: kept, they keep the run's context alive in the warm isolate
    const handles: { release(): void }[] = []
    const hold = <T extends { release(): void }>(handle: T) => {
      handles.push(handle)
      return handle
    }
    slot.runs++

    return new Promise<CodeRunOutcome>((resolve) => {
      const finish = (outcome: CodeRunOutcome, healthy: boolean) => {
        if (settled) return
        settled = true
        clearTimeout(cpuTimer)
        clearTimeout(wallTimer)
        request.signal.removeEventListener('abort', onAbort)
        this.running.delete(stop)
        slot.onParked = undefined
        if (healthy && this.reusable(slot)) {
          for (const handle of handles) handle.release()
          this.release(slot)
        } else {
          this.discard(slot)
        }
        resolve(outcome)
      }
      const stop = (outcome: CodeRunOutcome) => finish(outcome, false)
      const fail = (kind: CodeFailureKind, message: string) => stop({ ok: false, kind, message, logs })
      // what the program reported stands once the isolate is idle: a task queued behind its microtasks has run
      const report = (outcome: CodeRunOutcome) => {
        if (reported) return
        reported = true
        context!.eval('0').then(
          () => finish(outcome, true),
          (error) => onRejected(error),
        )
      }

      const forward = async (call: number, name: string, json: string) => {
        let reply: BridgeReply
        waiting++
        waitingBytes += json.length
        try {
          if (waitingBytes > limits.memoryMb * 1024 * 1024) return fail('memory', limitMessages.refused(limits, 'waiting'))
          // the prelude refuses these first; the host does not take the program's word for it
          if (!tools.has(name)) reply = { ok: false, message: `${name} is not a tool of this run` }
          else if (waiting > maxPendingCalls) reply = { ok: false, message: `${maxPendingCalls} tool calls are already waiting` }
          else reply = await request.call(name, json)
        } catch (error) {
          reply = { ok: false, message: messageOf(error) }
        } finally {
          waiting--
          waitingBytes -= json.length
        }
        if (settled) return
        reply = boundReply(reply, limits, name)
        const answer = reply.ok ? [call, true, reply.value] : [call, false, reply.message, reply.code]
        try {
          deliver!.applyIgnored(undefined, answer)
        } catch {}
      }

      // the program's only way out: an ignored callback, so the program never waits on the host's thread
      const bridge = new ivm.Callback(
        (kind: unknown, a: unknown, b: unknown, c: unknown) => {
          if (settled || reported) return
          switch (kind) {
            case 'call':
              if (typeof a !== 'number' || typeof b !== 'string' || typeof c !== 'string') return
              if (c.length > argumentBytes(limits)) return fail('memory', limitMessages.refused(limits, 'argument'))
              return void forward(a, b, c)
            case 'log':
              if (typeof a === 'string' && !output.log(a)) fail('output-limit', limitMessages.output(limits))
              return
            case 'done':
              if (typeof a !== 'string') return report({ ok: true, logs })
              if (!output.fits(a)) return fail('output-limit', limitMessages.output(limits))
              return report({ ok: true, logs, result: a })
            case 'throw': {
              const message = typeof a === 'string' ? a : 'the program threw'
              const at = typeof b === 'number' ? { line: b, column: typeof c === 'number' ? c : undefined } : {}
              return report({ ok: false, kind: 'exception', message, logs, ...at })
            }
            case 'limit':
              return fail('output-limit', limitMessages.output(limits))
            case 'memory':
              return fail('memory', limitMessages.refused(limits, a))
          }
        },
        { ignored: true },
      )

      const onAbort = () => fail('abort', 'the run was aborted')
      const checkCpu = () => {
        let used: number
        try {
          used = Number(isolate.cpuTime - cpuStart) / 1e6
        } catch {
          return
        }
        if (used >= limits.cpuMs) return fail('timeout', limitMessages.cpu(limits))
        cpuTimer = setTimeout(checkCpu, Math.max(1, limits.cpuMs - used))
      }
      const onRejected = (error: unknown) => {
        if (settled) return
        const message = messageOf(error)
        // nothing but its memory limit disposes an isolate behind our back (an await leaves only "abandoned" to hear)
        if (/memory limit/.test(message) || isolate.isDisposed) fail('memory', limitMessages.memory(limits))
        else stop({ ok: false, kind: 'exception', message: error instanceof Error ? `${error.name}: ${message}` : message, logs })
      }

      let script: ivm.Script
      let start: ivm.Reference
      try {
        context = hold(isolate.createContextSync())
        const setup = hold(slot.prelude.runSync(context, { reference: true }))
        const args = [bridge, JSON.stringify(request.tools), limits.outputBytes, limits.memoryMb * MB, argumentBytes(limits), maxPendingCalls]
        const api: ivm.Reference<any> = hold(setup.applySync(undefined, args, { result: { reference: true } }))
        start = hold(api.getSync('start', { reference: true }))
        deliver = hold(api.getSync('deliver', { reference: true }))
      } catch (error) {
        return fail('crash', `could not prepare the isolate: ${messageOf(error)}`)
      }
      try {
        script = hold(isolate.compileScriptSync(wrapProgram(request.code), { filename: 'program.js', lineOffset: -1 }))
      } catch (error) {
        const text = messageOf(error)
        const match = syntaxLocation.exec(text)
        const at = match ? { line: Number(match[1]), column: Number(match[2]) } : {}
        const where = match ? ` (line ${match[1]}, column ${match[2]})` : ''
        return finish({ ok: false, kind: 'exception', message: `SyntaxError: ${text.replace(syntaxLocation, '')}${where}`, logs, ...at }, true)
      }

      request.signal.addEventListener('abort', onAbort, { once: true })
      this.running.add(stop)
      slot.onParked = () => fail('memory', `${limitMessages.memory(limits)}: V8 ran out of memory outside the isolate's limit`)
      const cpuStart = isolate.cpuTime
      cpuTimer = setTimeout(checkCpu, limits.cpuMs)
      wallTimer = setTimeout(() => fail('timeout', limitMessages.wall(limits)), limits.wallMs)
      // async throughout: a program can run code while its script is evaluated, and that must not block the host
      script
        .run(context, { reference: true })
        .then((main) => start.apply(undefined, [hold(main).derefInto()], { result: { promise: true } }))
        // the program's outcome arrives through the bridge; this only hears of a dying isolate
        .then(() => {}, onRejected)
    })
  }

  private create(memoryMb: number): Slot {
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
    return slot
  }

  // an isolate whose heap stays half full after a run would leave the next program less than its memoryMb
  private reusable(slot: Slot) {
    if (slot.parked || slot.runs >= this.maxRunsPerIsolate || slot.isolate.isDisposed) return false
    try {
      return slot.isolate.getHeapStatisticsSync().used_heap_size < (slot.memoryMb * MB) / 2
    } catch {
      return false
    }
  }

  private release(slot: Slot) {
    if (this.closed || slot.memoryMb !== this.limits.memoryMb || this.idle.length >= this.poolSize) slot.isolate.dispose()
    else this.idle.push(slot)
  }

  private discard(slot: Slot) {
    if (!slot.parked && !slot.isolate.isDisposed) slot.isolate.dispose()
    // off the path of the run that is settling
    setImmediate(() => this.fill())
  }

  private fill() {
    while (!this.closed && this.idle.length < this.poolSize) this.idle.push(this.create(this.limits.memoryMb))
  }
}
