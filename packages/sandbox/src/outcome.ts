import type { BridgeReply, CallSite, CodeFailureKind, CodeRunLimits, CodeRunOutcome } from './types.ts'

// what both backends say when a run fails, so a program's failure reads the same whichever sandbox ran it

export const failure = (kind: CodeFailureKind, message: string, logs: string[] = []): CodeRunOutcome => ({ ok: false, kind, message, logs })

/** what a thrown value says; reading it never throws in turn (core's, named here for both backends' hosts) */
export { messageOf } from '@faber/core/message'

const MB = 1024 * 1024

/** the largest JSON text one tool argument may be (a quarter of `memoryMb`): the host holds it while the call runs */
export const argumentBytes = (limits: CodeRunLimits) => Math.floor((limits.memoryMb * MB) / 4)
/** the largest JSON text a tool's reply may be to enter the program (a quarter of `memoryMb`) */
export const replyBytes = argumentBytes
/** tool calls one program may have waiting at once; more are refused inside the sandbox */
export const maxPendingCalls = 1024
/** what a sandbox may hold beyond the program's `memoryMb`: its own code, the prelude and a fresh context */
export const overheadMb = 16

/**
 * where a call was made, as it crosses every transport between the prelude and the host: one number, line × 2^21 +
 * column (the prelude's siteOf makes it), 0 when unknown
 */
export const SITE_COLUMNS = 2 ** 21

export function siteNumber(site: CallSite): number {
  return site.line * SITE_COLUMNS + site.column
}

export function callSite(site: unknown): CallSite | undefined {
  if (typeof site !== 'number' || !(site >= SITE_COLUMNS) || !Number.isSafeInteger(site)) return undefined
  const column = site % SITE_COLUMNS
  return column > 0 ? { line: (site - column) / SITE_COLUMNS, column } : undefined
}

export const limitMessages = {
  cpu: (limits: CodeRunLimits) => `the program computed for more than ${limits.cpuMs} ms of CPU time (cpuMs); time spent awaiting tools does not count`,
  wall: (limits: CodeRunLimits) => `the program did not finish within ${limits.wallMs} ms of wall-clock time (wallMs), waits on tools included`,
  memory: (limits: CodeRunLimits) => `the program ran out of its ${limits.memoryMb} MB of memory (memoryMb)`,
  output: (limits: CodeRunLimits) => `the program printed or returned more than ${limits.outputBytes} bytes (outputBytes)`,
  /** a `memory` failure the prelude or the bridge reported, by its reason */
  refused: (limits: CodeRunLimits, reason: unknown) =>
    reason === 'argument'
      ? `${limitMessages.memory(limits)}: a tool argument was larger than ${argumentBytes(limits)} bytes (a quarter of memoryMb); pass less data per call`
      : reason === 'waiting'
        ? `${limitMessages.memory(limits)}: the arguments of the tool calls waiting at once passed memoryMb; await calls before starting more`
        : `${limitMessages.memory(limits)}: too many array buffers`,
}

/** a reply the sandbox can take in: a tool result larger than the program's share of memory is refused, not copied */
export function boundReply(reply: BridgeReply, limits: CodeRunLimits, name: string): BridgeReply {
  if (!reply.ok) {
    const message = String(reply.message)
    return message.length > 4096 ? { ...reply, message: `${message.slice(0, 4096)}…` } : { ...reply, message }
  }
  if (typeof reply.value !== 'string') return { ok: false, message: 'the host replied without a JSON value' }
  if (reply.value.length <= replyBytes(limits)) return reply
  return { ok: false, message: `the result of ${name} is larger than ${replyBytes(limits)} bytes (a quarter of memoryMb); ask for less at a time` }
}

/** the host's count of what a run printed; the prelude counts too, this is the copy the host trusts */
export class Output {
  readonly logs: string[] = []
  private bytes = 0

  constructor(private limit: number) {}

  /** false when the line does not fit: the run is over its budget */
  log(line: string) {
    // a utf-16 unit is at least one utf-8 byte: an overlong line is over without measuring it
    this.bytes += line.length > this.limit ? line.length : Buffer.byteLength(line)
    if (this.bytes > this.limit) return false
    this.logs.push(line)
    return true
  }

  fits(result: string) {
    return result.length <= this.limit - this.bytes && this.bytes + Buffer.byteLength(result) <= this.limit
  }
}
