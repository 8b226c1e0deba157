// results and error codes. a result is the one answer a call gets; `content` is what the model reads.

import type { CodeFailureKind } from './code-runtime.ts'
import type { Json } from './json.ts'

/** every code has exactly one meaning; see the package README */
export type ErrorCode =
  | 'UNKNOWN_TOOL' // no such tool for this caller, or collapsed by Code Mode (the message names the route)
  | 'INVALID_ARGUMENTS' // arguments are not lossless JSON, or do not match the tool's parameters
  | 'DENIED' // a policy participant refused the call or failed closed; `deniedBy` says which
  | 'ABORTED_BEFORE_DISPATCH' // the signal was aborted before the body started
  | 'ABORTED' // the signal was aborted while the body ran; replaces only a success
  | 'INVALID_OUTPUT' // the body returned a value that is not lossless JSON or does not match the output schema
  | 'TOOL_TIMEOUT' // the body ran past its time budget (set by a timeout wrapper)
  | 'TOOL_FAILED' // the body threw; a tool's own code travels as `toolCode`
  | 'CODE_RUN_FAILED' // a run_code program failed; `kind` says how
  | 'RESULT_WITHHELD' // the body ran, then a tools/post-execute listener withheld its result; `withheldBy` says which
  | 'DEPLOYMENT_FAILED' // a plugin of the deployment is not in force (failed to start, or waits for a service): nothing ran

export const ERROR_CODES: readonly ErrorCode[] = [
  'UNKNOWN_TOOL',
  'INVALID_ARGUMENTS',
  'DENIED',
  'ABORTED_BEFORE_DISPATCH',
  'ABORTED',
  'INVALID_OUTPUT',
  'TOOL_TIMEOUT',
  'TOOL_FAILED',
  'CODE_RUN_FAILED',
  'RESULT_WITHHELD',
  'DEPLOYMENT_FAILED',
]

export type Stage = 'create' | 'pre-execute' | 'approval' | 'guard' | 'execute' | 'body' | 'post-execute'

/** who refused a call (or withheld its result): the stage and the plugin (or `core`) that owns the participant */
export interface DeniedBy {
  stage: Stage
  plugin: string
}

export interface ToolErrorInfo {
  code: ErrorCode
  message: string
  deniedBy?: DeniedBy
  /** RESULT_WITHHELD: the post-execute listener that withheld the result of a body that ran */
  withheldBy?: DeniedBy
  /** a tool's own error code, when its body threw one */
  toolCode?: string
  /** CODE_RUN_FAILED: how the program failed; `syntax`, `typecheck` and `unavailable` fail before a run starts */
  kind?: CodeFailureKind | 'syntax' | 'typecheck' | 'unavailable' | 'diverged'
  /** CODE_RUN_FAILED: what the program printed before it failed */
  logs?: string[]
  line?: number
  column?: number
}

/** one noteworthy decision on the way to a result, for observers such as the inspector */
export interface StageRecord {
  stage: Stage
  decision: string
  by?: string
  reason?: string
}

export interface ToolSuccess {
  readonly isError: false
  readonly value: Json
  readonly content: string
  readonly meta?: Readonly<Record<string, unknown>>
  readonly trace?: readonly StageRecord[]
}

export interface ToolFailure {
  readonly isError: true
  readonly error: Readonly<ToolErrorInfo>
  readonly content: string
  readonly meta?: Readonly<Record<string, unknown>>
  readonly trace?: readonly StageRecord[]
}

export type ToolResult = ToolSuccess | ToolFailure

/** makes an error result; wrappers use it to answer for a call (e.g. TOOL_TIMEOUT) */
export function errorResult(code: ErrorCode, message: string, extra: Omit<ToolErrorInfo, 'code' | 'message'> = {}): ToolFailure {
  return { isError: true, error: { ...extra, code, message }, content: `Error: ${message}` }
}

export function isToolResult(value: unknown): value is ToolResult {
  if (typeof value !== 'object' || value === null) return false
  const result = value as Record<string, unknown>
  if (typeof result.content !== 'string') return false
  if (result.isError === false) return 'value' in result
  if (result.isError !== true) return false
  const error = result.error as Record<string, unknown> | undefined
  return typeof error === 'object' && error !== null && typeof error.message === 'string' && ERROR_CODES.includes(error.code as ErrorCode)
}

/** thrown by a body that wants to answer with a ready-made error result (run_code does) */
export class ToolResultError extends Error {
  constructor(readonly result: ToolFailure) {
    super(result.error.message)
    this.name = 'ToolResultError'
  }
}
