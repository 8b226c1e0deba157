// what one execution is asked of and answers: the input a caller gives, a prepared call, the decisions of the
// pipeline's participants. types only, shared by the registry, the pipeline and the run_code bridge.

import type { Agent } from './agent.ts'
import type { CallSite } from './code-runtime.ts'
import type { Json } from './json.ts'
import type { ToolResult } from './result.ts'
import type { ExecutionMode } from './scheduler.ts'
import type { Execution, ExecutionToken } from './tool.ts'

export interface ExecutionInput {
  callId: string
  name: string
  /** any value; it is snapshotted as lossless JSON before anything else looks at it. undefined means {} */
  arguments?: unknown
  signal: AbortSignal
  agent?: Agent
  /**
   * the conversation this call belongs to, when one agent serves several at once (the MCP server passes its session
   * id): per-conversation policy state (the repeat-call breaker, per-turn limits, session grants) is kept per session.
   * a nested call inherits its program's
   */
  session?: string
  /** the token of the enclosing execution; only the run_code bridge sets it */
  parent?: ExecutionToken
  /** for a nested call: where in its program it was made (the run_code bridge sets it, when the code runtime said) */
  site?: CallSite
}

/** a call prepared for execution: arguments snapshotted and validated once, the definition resolved */
export interface PreparedCall {
  /** `parallel` only when the resolved definition's isConcurrencySafe(args) returns exactly true; else `exclusive` */
  readonly mode: ExecutionMode
  /** runs the call through the rest of the pipeline under `signal`; resolves with its one result */
  run(signal: AbortSignal): Promise<ToolResult>
}

/** an execution input before it has a signal: what prepare needs (callId is checked when the call runs) */
export type CallRequest = Omit<ExecutionInput, 'signal' | 'callId'> & { callId?: string }

/**
 * the executing half of `ctx.tools`, for hot callers (the agent loop, the MCP server, a benchmark): held once, it runs
 * calls without going through a cordis context, and cannot register anything
 */
export interface Executor {
  /** runs one call through the whole pipeline; resolves with exactly one result and never rejects for a tool's failure */
  execute(input: ExecutionInput): Promise<ToolResult>
  executionMode(input: Pick<ExecutionInput, 'name' | 'arguments' | 'agent' | 'parent'>): ExecutionMode
  /** create's signal-free half (snapshot, resolve, validate) once; read `mode` to schedule, then `run(signal)` */
  prepare(input: CallRequest): PreparedCall
}

export type PreDecision = { kind: 'allow' } | { kind: 'ask'; reason: string } | { kind: 'deny'; reason: string }
export type PostDecision = { kind: 'accept'; content?: string; value?: Json } | { kind: 'block'; feedback: string }
/** around-dispatch: call `next` (optionally with a replacement signal) to run the rest of the chain and the body */
export type DispatchNext = (signal?: AbortSignal) => Promise<ToolResult>
/** a synchronous, monotonic guard: undefined lets the call through; any string denies (an empty one with a default reason) */
export type Guard = (exec: Execution) => string | undefined | void

/** `timed-out`: no answer came before a deadline (the approval service's own, or the runtime's `approvalTimeoutMs`) */
export type ApprovalOutcome = 'allowed' | 'rejected' | 'cancelled' | 'unavailable' | 'timed-out'

export interface ApprovalRequest {
  agent?: Agent
  tool: string
  arguments: Json
  callId: string
  reason: string
  /** for a call made inside run_code: the program that made it */
  program?: string
  signal: AbortSignal
  exec: Execution
}

/** the shape the registry consults on `ask`; @faber/plugin-approval provides it */
export interface ApprovalService {
  request(request: ApprovalRequest): Promise<ApprovalOutcome>
}
