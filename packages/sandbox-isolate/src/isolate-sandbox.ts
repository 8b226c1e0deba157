import { failure, limitMessages, messageOf, Output } from '@faber/sandbox/outcome'
import { preludeSource, wrapProgram } from '@faber/sandbox/prelude'
import ivm from 'isolated-vm'
import {
  type BridgeReply,
  type CodeFailureKind,
  type CodeRunLimits,
  type CodeRunOutcome,
  type CodeRunRequest,
  type CodeRuntime,
  defaultCodeLimits,
} from './types.ts'

export interface IsolateSandboxOptions {
  /** warm isolates kept waiting; overlapping runs beyond it get an isolate made on demand */
  poolSize?: number
  /** fills in any limit a request leaves out; `memoryMb` is also the memory limit of the pooled isolates */
  limits?: Partial<CodeRunLimits>
}

interface Slot {
  isolate: ivm.Isolate
  prelude: ivm.Script
  memoryMb: number
}

const syntaxLocation = /\s*\[program\.js:(\d+):(\d+)\]$/

/**
 * a CodeRuntime on isolated-vm: each run gets a fresh context on a warm isolate, one run per isolate at a time.
 * an isolate that hit a limit, was aborted or misbehaved is disposed and replaced, never reused.
 */
export class IsolateSandbox implements CodeRuntime {
  readonly backend = 'isolated-vm'
  readonly poolSize: number
  readonly limits: CodeRunLimits
  private idle: Slot[] = []
  private running = new Set<(outcome: CodeRunOutcome) => void>()
  private closed = false

  constructor(options: IsolateSandboxOptions = {}) {
    this.poolSize = options.poolSize ?? 2
    this.limits = { ...defaultCodeLimits, ...options.limits }
    this.fill()
  }

  async run(request: CodeRunRequest): Promise<CodeRunOutcome> {
    const limits = { ...this.limits, ...request.limits }
    if (this.closed) return failure('crash', 'the sandbox is closed')
    if (request.signal.aborted) return failure('abort', 'the run was aborted before it started')
    let slot: Slot
    try {
      slot = (limits.memoryMb === this.limits.memoryMb && this.idle.pop()) || this.create(limits.memoryMb)
    } catch (error) {
      return failure('crash', `could not create an isolate: ${messageOf(error)}`)
    }
    return this.execute(slot, request, limits)
  }

  /** disposes every isolate; runs in progress end with kind `abort` */
  async close() {
    this.closed = true
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
    let context: ivm.Context | undefined
    let deliver: ivm.Reference | undefined
    let cpuTimer: NodeJS.Timeout | undefined
    let wallTimer: NodeJS.Timeout | undefined

    return new Promise<CodeRunOutcome>((resolve) => {
      const finish = (outcome: CodeRunOutcome, healthy: boolean) => {
        if (settled) return
        settled = true
        clearTimeout(cpuTimer)
        clearTimeout(wallTimer)
        request.signal.removeEventListener('abort', onAbort)
        this.running.delete(stop)
        if (healthy) {
          context?.release()
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
        try {
          reply = tools.has(name) ? await request.call(name, json) : { ok: false, message: `${name} is not a tool of this run` }
        } catch (error) {
          reply = { ok: false, message: messageOf(error) }
        }
        if (settled) return
        const answer = reply.ok
          ? typeof reply.value === 'string'
            ? [call, true, reply.value]
            : [call, false, 'the host replied without a JSON value']
          : [call, false, String(reply.message), reply.code]
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
              if (typeof a === 'number' && typeof b === 'string' && typeof c === 'string') void forward(a, b, c)
              return
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
              return fail('memory', `${limitMessages.memory(limits)}: too many array buffers`)
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
        context = isolate.createContextSync()
        const setup = slot.prelude.runSync(context, { reference: true })
        const args = [bridge, JSON.stringify(request.tools), limits.outputBytes, limits.memoryMb * 1024 * 1024]
        const api: ivm.Reference<any> = setup.applySync(undefined, args, { result: { reference: true } })
        start = api.getSync('start', { reference: true })
        deliver = api.getSync('deliver', { reference: true })
      } catch (error) {
        return fail('crash', `could not prepare the isolate: ${messageOf(error)}`)
      }
      try {
        script = isolate.compileScriptSync(wrapProgram(request.code), { filename: 'program.js', lineOffset: -1 })
      } catch (error) {
        const text = messageOf(error)
        const match = syntaxLocation.exec(text)
        const at = match ? { line: Number(match[1]), column: Number(match[2]) } : {}
        const where = match ? ` (line ${match[1]}, column ${match[2]})` : ''
        return finish({ ok: false, kind: 'exception', message: `SyntaxError: ${text.replace(syntaxLocation, '')}${where}`, logs, ...at }, true)
      }

      request.signal.addEventListener('abort', onAbort, { once: true })
      this.running.add(stop)
      const cpuStart = isolate.cpuTime
      cpuTimer = setTimeout(checkCpu, limits.cpuMs)
      wallTimer = setTimeout(() => fail('timeout', limitMessages.wall(limits)), limits.wallMs)
      // async throughout: a program can run code while its script is evaluated, and that must not block the host
      script
        .run(context, { reference: true })
        .then((main) => start.apply(undefined, [main.derefInto()], { result: { promise: true } }))
        // the program's outcome arrives through the bridge; this only hears of a dying isolate
        .then(() => {}, onRejected)
    })
  }

  private create(memoryMb: number): Slot {
    const isolate = new ivm.Isolate({ memoryLimit: memoryMb })
    const prelude = isolate.compileScriptSync(preludeSource, { filename: 'faber-prelude.js' })
    return { isolate, prelude, memoryMb }
  }

  private release(slot: Slot) {
    if (this.closed || slot.memoryMb !== this.limits.memoryMb || this.idle.length >= this.poolSize) slot.isolate.dispose()
    else this.idle.push(slot)
  }

  private discard(slot: Slot) {
    if (!slot.isolate.isDisposed) slot.isolate.dispose()
    // off the path of the run that is settling
    setImmediate(() => this.fill())
  }

  private fill() {
    while (!this.closed && this.idle.length < this.poolSize) this.idle.push(this.create(this.limits.memoryMb))
  }
}
