import type { CodeFailureKind, CodeRunLimits, CodeRunOutcome } from './types.ts'

// what both backends say when a run fails, so a program's failure reads the same whichever sandbox ran it

export const failure = (kind: CodeFailureKind, message: string, logs: string[] = []): CodeRunOutcome => ({ ok: false, kind, message, logs })

export const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error))

export const limitMessages = {
  cpu: (limits: CodeRunLimits) => `the program computed for more than ${limits.cpuMs} ms of CPU time (cpuMs); time spent awaiting tools does not count`,
  wall: (limits: CodeRunLimits) => `the program did not finish within ${limits.wallMs} ms of wall-clock time (wallMs), waits included`,
  memory: (limits: CodeRunLimits) => `the program ran out of its ${limits.memoryMb} MB of memory (memoryMb)`,
  output: (limits: CodeRunLimits) => `the program printed or returned more than ${limits.outputBytes} bytes (outputBytes)`,
}

/** the host's count of what a run printed; the prelude counts too, this is the copy the host trusts */
export class Output {
  readonly logs: string[] = []
  private bytes = 0

  constructor(private limit: number) {}

  /** false when the line does not fit: the run is over its budget */
  log(line: string) {
    this.bytes += Buffer.byteLength(line)
    if (this.bytes > this.limit) return false
    this.logs.push(line)
    return true
  }

  fits(result: string) {
    return this.bytes + Buffer.byteLength(result) <= this.limit
  }
}
