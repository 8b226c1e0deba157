// the types of budgets.mjs
import type { CodeRunLimits } from './types.ts'

/** the largest JSON text one tool argument may be (a quarter of `memoryMb`): the host holds it while the call runs */
export declare const argumentBytes: (limits: CodeRunLimits) => number
/** the largest JSON text a tool's reply may be to enter the program (a quarter of `memoryMb`) */
export declare const replyBytes: (limits: CodeRunLimits) => number
/** tool calls one program may have waiting at once; more are refused inside the sandbox */
export declare const maxPendingCalls: number
/** what a sandbox may hold beyond the program's `memoryMb`: its own code, the prelude and a fresh context */
export declare const overheadMb: number
export declare const limitMessages: {
  cpu(limits: CodeRunLimits): string
  wall(limits: CodeRunLimits): string
  memory(limits: CodeRunLimits): string
  output(limits: CodeRunLimits): string
  /** a `memory` failure the prelude or the bridge reported, by its reason */
  refused(limits: CodeRunLimits, reason: unknown): string
}
