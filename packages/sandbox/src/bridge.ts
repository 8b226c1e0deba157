// the host's side of one run's bridge, the same for every backend: what the program asks for is checked before it is
// forwarded, what waits on the host is counted against memoryMb, a reply is bounded before it is copied in, output counted

import { messageOf } from '@faber/core/message'
import { argumentBytes, limitMessages, maxPendingCalls, replyBytes } from './budgets.mjs'
import type { ProgramReports, Refusal } from './contract.ts'
import type { BridgeReply, CallSite, CodeFailureKind, CodeRunLimits, CodeRunOutcome, CodeRunRequest } from './types.ts'

// the microtask that hands in the replies that came back at once is a reaction to this promise: node's queueMicrotask
// makes an async resource for each task it queues, several times what a reaction costs
const resolved = Promise.resolve()

// where a call was made, as it crosses every transport between the prelude and the host: one number, line × 2^21 +
// column (the prelude's siteOf makes it), 0 when unknown
const SITE_COLUMNS = 2 ** 21

function callSite(site: unknown): CallSite | undefined {
  if (typeof site !== 'number' || !(site >= SITE_COLUMNS) || !Number.isSafeInteger(site)) return undefined
  const column = site % SITE_COLUMNS
  return column > 0 ? { line: (site - column) / SITE_COLUMNS, column } : undefined
}

/** a reply the sandbox can take in: a tool result larger than the program's share of memory is refused, not copied */
function boundReply(reply: BridgeReply, limits: CodeRunLimits, name: string): BridgeReply {
  if (!reply.ok) return { ...reply, message: messageOf(reply.message, 4096) }
  if (typeof reply.value !== 'string') return { ok: false, message: 'the host replied without a JSON value' }
  if (reply.value.length <= replyBytes(limits)) return reply
  return { ok: false, message: `the result of ${name} is larger than ${replyBytes(limits)} bytes (a quarter of memoryMb); ask for less at a time` }
}

/**
 * what a program reports (contract.ts ProgramReports), taken as it comes. every report is an own function, so that a
 * driver may hand one on alone or spread the lot into a sink of its own
 */
export class RunBridge implements ProgramReports {
  readonly logs: string[] = []
  // the bytes the run printed: the prelude counts them too, this is the count the host trusts
  private printed = 0
  private tools: Set<string>
  private pending = 0
  // what the calls waiting on the host hold there: the program's memoryMb bounds it as it bounds the sandbox
  private waitingBytes = 0

  constructor(
    private request: CodeRunRequest,
    private limits: CodeRunLimits,
    /** whether the run is over: nothing more is taken, and a reply goes nowhere */
    readonly ended: () => boolean,
    /** ends the run with its outcome, once; `heap` after a clean end */
    private finish: (outcome: CodeRunOutcome, heap?: number) => void,
    /** hands a bounded reply to the program */
    private answer: (call: number, reply: BridgeReply) => void,
  ) {
    this.tools = new Set(request.tools)
  }

  /** calls waiting on the host: forwarded, not answered yet */
  get waiting() {
    return this.pending
  }

  /** a call is forwarded unless its argument is over budget, which ends the run */
  readonly call = (call: number, name: string, json: string, site?: number) => {
    if (json.length > argumentBytes(this.limits)) return this.refused('argument')
    this.forward(call, name, json, site)
  }

  readonly log = (line: string) => {
    const limit = this.limits.outputBytes
    // a utf-16 unit is at least one utf-8 byte: an overlong line is over without measuring it
    this.printed += line.length > limit ? line.length : Buffer.byteLength(line)
    if (this.printed > limit) {
      this.overOutput()
      return false
    }
    this.logs.push(line)
    return true
  }

  readonly done = (result: string | undefined, heap?: number) => {
    if (result === undefined) return this.finish({ ok: true, logs: this.logs }, heap)
    const left = this.limits.outputBytes - this.printed
    if (result.length > left || Buffer.byteLength(result) > left) return this.overOutput()
    this.finish({ ok: true, logs: this.logs, result }, heap)
  }

  readonly threw = (message: string, line?: number, column?: number, heap?: number) =>
    this.finish({ ok: false, kind: 'exception', message, logs: this.logs, ...(line ? { line, column } : {}) }, heap)

  readonly overOutput = () => this.failed('output-limit', limitMessages.output(this.limits))

  readonly refused = (reason: Refusal) => this.failed('memory', limitMessages.refused(this.limits, reason))

  /** ends the run as failed, with what it printed so far */
  readonly failed = (kind: CodeFailureKind, message: string) => this.finish({ ok: false, kind, message, logs: this.logs })

  readonly values = (values: number[]) => this.request.values?.record(values)

  // a call forwarded to the host: the reply that needed no waiting is queued and handed to the program on a microtask
  // (never from inside the report of the call it answers); a pending one when it settles. no promise or closure of the
  // bridge's own per call
  private forward(call: number, name: string, json: string, site: number | undefined) {
    const { limits, request } = this
    this.pending++
    this.waitingBytes += json.length
    let reply: BridgeReply | Promise<BridgeReply>
    try {
      if (this.waitingBytes > limits.memoryMb * 1024 * 1024) {
        this.left(json)
        return this.refused('waiting')
      }
      // the prelude refuses these first; the host does not take the program's word for it
      if (!this.tools.has(name)) reply = { ok: false, message: `${name} is not a tool of this run` }
      else if (this.pending > maxPendingCalls) reply = { ok: false, message: `${maxPendingCalls} tool calls are already waiting` }
      // a backend's own call may answer with any thenable: only callNow's answers are taken as they are
      else {
        const at = callSite(site)
        reply = request.callNow ? request.callNow(name, json, at) : Promise.resolve(request.call(name, json, at))
      }
    } catch (error) {
      reply = { ok: false, message: messageOf(error) }
    }
    if (!(reply instanceof Promise)) return this.replied(call, name, json, reply)
    reply.then(
      (reply) => this.replied(call, name, json, reply, true),
      (error) => this.replied(call, name, json, { ok: false, message: messageOf(error) }, true),
    )
  }

  private left(json: string) {
    this.pending--
    this.waitingBytes -= json.length
  }

  private replied(call: number, name: string, json: string, reply: BridgeReply, later = false) {
    this.left(json)
    if (this.ended()) return
    let bounded: BridgeReply
    try {
      bounded = boundReply(reply, this.limits, name)
    } catch (error) {
      bounded = { ok: false, message: messageOf(error) }
    }
    if (later) {
      try {
        this.answer(call, bounded)
      } catch (error) {
        this.unanswered(error)
      }
      return
    }
    this.ready[this.readyEnd++] = call
    this.ready[this.readyEnd++] = bounded
    if (this.readyEnd === 2) resolved.then(this.flush)
  }

  // a backend that could not hand a reply in (its unit gone) ends the run: the throw must not escape into the host's job.
  // (each caller catches it itself: a frame of the bridge's own would count against the stack a test double on the
  // host's thread shows the program)
  private unanswered(error: unknown) {
    this.failed('crash', `a reply could not be handed to the program: ${messageOf(error)}`)
  }

  // replies that came back at once, as call, reply pairs up to `readyEnd`, answered in order on the next microtask. the
  // list keeps its size: emptied by `length = 0`, it let go of its store, which the next reply made again
  private ready: (number | BridgeReply | undefined)[] = []
  private readyEnd = 0
  private flush = () => {
    const ready = this.ready
    try {
      // answering one may bring the program's next call, and its reply joins this same list
      for (let i = 0; i < this.readyEnd && !this.ended(); i += 2) {
        const reply = ready[i + 1] as BridgeReply
        // the list holds no reply it handed in
        ready[i + 1] = undefined
        try {
          this.answer(ready[i] as number, reply)
        } catch (error) {
          this.unanswered(error)
        }
      }
    } finally {
      this.readyEnd = 0
    }
  }
}
