// the budgets of a run every backend keeps alike, and what a run that passed one is told. plain js (its types are in
// budgets.d.mts), so that a sandbox process loads it on plain node

const MB = 1024 * 1024

/** the largest JSON text one tool argument may be (a quarter of `memoryMb`): the host holds it while the call runs */
export const argumentBytes = (limits) => Math.floor((limits.memoryMb * MB) / 4)
/** the largest JSON text a tool's reply may be to enter the program (a quarter of `memoryMb`) */
export const replyBytes = argumentBytes
/** tool calls one program may have waiting at once; more are refused inside the sandbox */
export const maxPendingCalls = 1024
/** what a sandbox may hold beyond the program's `memoryMb`: its own code, the prelude and a fresh context */
export const overheadMb = 16

export const limitMessages = {
  cpu: (limits) => `the program computed for more than ${limits.cpuMs} ms of CPU time (cpuMs); time spent awaiting tools does not count`,
  wall: (limits) => `the program did not finish within ${limits.wallMs} ms of wall-clock time (wallMs), waits on tools included`,
  memory: (limits) => `the program ran out of its ${limits.memoryMb} MB of memory (memoryMb)`,
  output: (limits) => `the program printed or returned more than ${limits.outputBytes} bytes (outputBytes)`,
  /** a `memory` failure the prelude or the bridge reported, by its reason */
  refused: (limits, reason) =>
    reason === 'argument'
      ? `${limitMessages.memory(limits)}: a tool argument was larger than ${argumentBytes(limits)} bytes (a quarter of memoryMb); pass less data per call`
      : reason === 'waiting'
        ? `${limitMessages.memory(limits)}: the arguments of the tool calls waiting at once passed memoryMb; await calls before starting more`
        : `${limitMessages.memory(limits)}: too many array buffers`,
}
