// the types of budgets.mjs (documented there)
import type { CodeRunLimits } from './types.ts'

export declare const argumentBytes: (limits: CodeRunLimits) => number
export declare const replyBytes: (limits: CodeRunLimits) => number
export declare const maxPendingCalls: number
export declare const overheadMb: number
export declare const limitMessages: {
  cpu(limits: CodeRunLimits): string
  wall(limits: CodeRunLimits): string
  memory(limits: CodeRunLimits): string
  output(limits: CodeRunLimits): string
  refused(limits: CodeRunLimits, reason: unknown): string
}
