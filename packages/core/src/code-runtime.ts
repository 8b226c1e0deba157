// the seam between run_code (in core) and the sandboxes that run programs (separate packages).
// a backend only runs JavaScript and forwards binding calls; scheduling, policy and rendering stay in core.

import { Schema } from 'cordis'

export interface CodeRunLimits {
  /** compute budget in ms: time the program spends running, not time it spends awaiting tool calls */
  cpuMs: number
  /** wall-clock budget in ms, waits on tools included; it stops while a nested call waits on a person (`waits`) */
  wallMs: number
  /** heap budget in MB */
  memoryMb: number
  /** budget in bytes for everything the program prints plus the JSON of its result */
  outputBytes: number
}

export type CodeFailureKind = 'exception' | 'timeout' | 'memory' | 'output-limit' | 'abort' | 'crash'

/** where in a program a binding call was made: the line and column (both from 1) of the program as it was written */
export interface CallSite {
  line: number
  column: number
}

/** what the host answers to one binding call */
export type BridgeReply = { ok: true; value: string } | { ok: false; message: string; code?: string }

export interface CodeRunRequest {
  /**
   * JavaScript (types already stripped, lines and columns kept): the body of an async function whose
   * parameters are `tools` and `console`. Top-level `await` and `return` are allowed.
   */
  code: string
  /** binding names exposed on the program's `tools` object, one async function each */
  tools: readonly string[]
  /**
   * the host bridge: called once per binding call with the tool name and the JSON text of its single argument
   * (already checked to be lossless JSON inside the sandbox), and where in the program the call was made, when the
   * backend knows. `value` in a reply is JSON text.
   */
  call(name: string, argumentsJson: string, site?: CallSite): Promise<BridgeReply>
  /**
   * the same call as `call` (one or the other, never both, per binding call), for a backend that can take a reply at
   * once: a reply that needed no waiting (most nested calls: no policy held them up and the tool answered at once) comes
   * back as it is, not as a promise. however it comes back, the backend hands it to the program later, never from
   * inside the report of the call it answers
   */
  callNow?(name: string, argumentsJson: string, site?: CallSite): BridgeReply | Promise<BridgeReply>
  /** aborting it ends the run with kind `abort` */
  signal: AbortSignal
  /**
   * whether the program waits on a person now (a nested call's approval or form): while it does, the backend stops the
   * run's wall-clock timer, and starts it again with what was left when the wait ends. the cpu budget is untouched
   */
  waits?: WaitSignal
  /**
   * the clock and random numbers the program reads (`Date.now()`, `new Date()`, `Date()`, `Math.random()`), recorded:
   * the program reads `replay` first, in order, and the values it reads beyond them are handed to `record`, in order, at
   * the latest before its next tool call. a program run again after a checkpoint so reads what it read the first time.
   * left out, nothing is recorded
   */
  values?: RecordedValues
  /** overrides for this run; the backend fills the rest from its own configuration */
  limits?: Partial<CodeRunLimits>
}

/** the non-deterministic values a run reads, recorded and fed back (CodeRunRequest.values) */
export interface RecordedValues {
  readonly replay: readonly number[]
  record(values: readonly number[]): void
}

/** a run's waits on a person, as its caller tells them to the backend */
export interface WaitSignal {
  /** true while the program waits on a person: its wall clock is stopped */
  readonly waiting: boolean
  /** calls `listener` each time `waiting` changes; returns the function that stops it */
  watch(listener: (waiting: boolean) => void): () => void
}

export type CodeRunOutcome =
  | { ok: true; logs: string[]; result?: string }
  | { ok: false; kind: CodeFailureKind; message: string; logs: string[]; line?: number; column?: number }

/** how busy a code runtime is, for the inspector */
export interface CodeRuntimeLoad {
  /** programs running now */
  running: number
  /** runs waiting for a place under the cap */
  queued: number
  /** the cap on programs running at once */
  maxConcurrent: number
  /** the most programs that ran at once, and the longest the queue was, since the runtime started */
  peakRunning: number
  peakQueued: number
}

export interface CodeRuntime {
  /** a short name for reports, e.g. `worker-vm` or `isolated-vm` (not `name`: cordis services own that) */
  readonly backend: string
  run(request: CodeRunRequest): Promise<CodeRunOutcome>
  /** how busy it is; optional, for the inspector */
  load?(): CodeRuntimeLoad
}

export const defaultCodeLimits: CodeRunLimits = {
  cpuMs: 5000,
  wallMs: 30000,
  memoryMb: 64,
  outputBytes: 64 * 1024,
}

/**
 * the one schema of the limits, every key optional: core's `codeLimits` (overrides for every program) and each
 * sandbox's `limits` (filled from `defaultCodeLimits` by the sandbox) both use it, so they cannot disagree
 */
export const CodeRunLimits: Schema<Partial<CodeRunLimits>> = Schema.object({
  cpuMs: Schema.natural().min(1).description('compute budget in ms; time spent awaiting tools does not count'),
  wallMs: Schema.natural().min(1).description('wall-clock budget in ms, waits on tools included, waits on a person not'),
  memoryMb: Schema.natural().min(8).description('heap budget in MB, array buffers included'),
  outputBytes: Schema.natural().min(256).description('budget for what a program prints plus the JSON of its result'),
})
