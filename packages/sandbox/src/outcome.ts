import { replyBytes } from './budgets.mjs'
import type { BridgeReply, CallSite, CodeFailureKind, CodeRunLimits, CodeRunOutcome } from './types.ts'

// what both backends say when a run fails, so a program's failure reads the same whichever sandbox ran it

export const failure = (kind: CodeFailureKind, message: string, logs: string[] = []): CodeRunOutcome => ({ ok: false, kind, message, logs })

/** what a thrown value says; reading it never throws in turn (core's, named here for both backends' hosts) */
export { messageOf } from '@faber/core/message'
// the budgets and what a run that passed one is told (budgets.mjs, plain js for the sandbox process)
export { argumentBytes, limitMessages, maxPendingCalls, overheadMb, replyBytes } from './budgets.mjs'

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
