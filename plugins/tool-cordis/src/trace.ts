// the call trace: a bounded ring of recent calls per agent, filled from tools/pre-execute (when a call
// reached policy) and tools/result (every call, collapsed ones included). it only observes.

import type { Agent, CallSite, Execution, ExecutionToken, Json, StageRecord, ToolResult } from '@faber/core'

export interface CallError {
  code: string
  message: string
  deniedBy?: { stage: string; plugin: string }
  /** RESULT_WITHHELD: the body ran, and this participant kept its result from the model */
  withheldBy?: { stage: string; plugin: string }
  toolCode?: string
  kind?: string
}

export interface CallRecord {
  /** increases by one per recorded call, across agents, in the order results arrived */
  seq: number
  callId: string
  name: string
  /** the calling agent, null for a call made on the global layer */
  agent: string | null
  /** made inside a run_code program */
  nested: boolean
  /** the call id of the enclosing execution, for a nested call */
  outerCallId?: string
  /** for a nested call: the line and column of its program where it was made */
  site?: CallSite
  /** the outermost call's id (the call's own for a direct call) */
  rootCallId: string
  /** the arguments as JSON, cut to a preview */
  arguments: string
  /** whether tools/pre-execute was reached, i.e. whether any policy saw the call */
  reachedPolicy: boolean
  /** why policy never saw it, when it did not */
  note?: string
  /** the stage decisions the core recorded, in order */
  stages: StageRecord[]
  outcome: 'ok' | 'error'
  error?: CallError
  /** wall-clock time when the call reached tools/pre-execute, or ended, for calls that never did (epoch ms) */
  startedAt: number
  /** ms from tools/pre-execute to the result; 0 for calls that ended before policy */
  durationMs: number
}

export const COLLAPSED_NOTE = 'rejected by the core before policy (Code Mode collapse): no policy saw it'
export const BEFORE_POLICY_NOTE = 'ended in the core before policy: no policy saw it'

const ARGUMENTS_PREVIEW = 160
const MESSAGE_PREVIEW = 300
const REASON_PREVIEW = 2000

export interface Clock {
  /** monotonic ms, for durations */
  now(): number
  /** epoch ms, for timestamps */
  wall(): number
}

const systemClock: Clock = { now: () => performance.now(), wall: () => Date.now() }

function cut(text: string, max: number) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text
}

/** the JSON text of a value cut to `max` characters, without serializing more of a large value than it shows */
export function preview(value: Json, max: number): string {
  let out = ''
  const walk = (v: Json): boolean => {
    if (v === null || typeof v !== 'object') {
      out += typeof v === 'string' ? JSON.stringify(v.length > max ? v.slice(0, max) : v) : String(v)
    } else if (Array.isArray(v)) {
      out += '['
      for (let i = 0; i < v.length; i++) {
        if (i) out += ','
        if (!walk(v[i])) return false
      }
      out += ']'
    } else {
      out += '{'
      let first = true
      for (const key of Object.keys(v)) {
        out += `${first ? '' : ','}${JSON.stringify(key.length > max ? key.slice(0, max) : key)}:`
        first = false
        if (!walk((v as Record<string, Json>)[key])) return false
      }
      out += '}'
    }
    return out.length <= max
  }
  walk(value)
  return cut(out, max)
}

/** told of each call as it reaches policy and as it is recorded (the web view's live stream) */
export interface TraceObserver {
  start?(exec: Execution, startedAt: number): void
  record?(record: CallRecord, exec: Execution): void
}

export class CallTrace {
  private started = new WeakMap<ExecutionToken, { at: number; wall: number }>()
  private rings = new Map<Agent | undefined, CallRecord[]>()
  private seq = 0
  private observers = new Set<TraceObserver>()

  constructor(
    private size: number,
    private clock: Clock = systemClock,
  ) {}

  /** tools/pre-execute: the call reached policy */
  enter(exec: Execution) {
    const start = { at: this.clock.now(), wall: this.clock.wall() }
    this.started.set(exec.token, start)
    if (this.observers.size) this.tell((observer) => observer.start?.(exec, start.wall))
  }

  /** observes calls from now on; returns the disposer. an observer that throws is ignored: the trace only observes */
  observe(observer: TraceObserver): () => void {
    this.observers.add(observer)
    return () => this.observers.delete(observer)
  }

  private tell(call: (observer: TraceObserver) => void) {
    for (const observer of this.observers) {
      try {
        call(observer)
      } catch {}
    }
  }

  /** tools/result: every call ends here exactly once */
  record(exec: Execution, result: ToolResult) {
    const start = this.started.get(exec.token)
    this.started.delete(exec.token)
    // a reason comes from a plugin or a model: kept like an error message, cut to 2 000 characters
    const stages = (result.trace ?? []).map((stage) =>
      stage.reason && stage.reason.length > REASON_PREVIEW ? { ...stage, reason: cut(stage.reason, REASON_PREVIEW) } : { ...stage },
    )
    const collapsed = stages[0]?.stage === 'create' && stages[0].decision === 'collapsed'
    // a listener prepended after this one could deny before ours runs: its record in the trace still shows policy was reached
    const reachedPolicy = start !== undefined || stages.some((stage) => stage.stage !== 'create')
    const record: CallRecord = {
      seq: ++this.seq,
      callId: exec.callId,
      name: exec.name,
      agent: exec.agent?.name ?? null,
      nested: exec.parent !== undefined,
      rootCallId: exec.rootCallId,
      arguments: preview(exec.arguments, ARGUMENTS_PREVIEW),
      reachedPolicy,
      stages,
      outcome: result.isError ? 'error' : 'ok',
      startedAt: start?.wall ?? this.clock.wall(),
      durationMs: start ? Math.max(0, this.clock.now() - start.at) : 0,
    }
    if (exec.parent) record.outerCallId = exec.parent.callId
    if (exec.site) record.site = { ...exec.site }
    if (!reachedPolicy) record.note = collapsed ? COLLAPSED_NOTE : BEFORE_POLICY_NOTE
    if (result.isError) {
      const { code, message, deniedBy, withheldBy, toolCode, kind } = result.error
      const error: CallError = { code, message: cut(message, MESSAGE_PREVIEW) }
      if (deniedBy) error.deniedBy = { ...deniedBy }
      if (withheldBy) error.withheldBy = { ...withheldBy }
      if (toolCode !== undefined) error.toolCode = toolCode
      if (kind !== undefined) error.kind = kind
      record.error = error
    }
    let ring = this.rings.get(exec.agent)
    if (!ring) this.rings.set(exec.agent, (ring = []))
    ring.push(record)
    if (ring.length > this.size) ring.splice(0, ring.length - this.size)
    if (this.observers.size) this.tell((observer) => observer.record?.(record, exec))
  }

  /** the recent calls of one agent (undefined: the global layer), oldest first */
  of(agent: Agent | undefined): CallRecord[] {
    return [...(this.rings.get(agent) ?? [])]
  }

  /** every ring, merged in recording order; rings of agents that are gone (`live` false) are dropped */
  all(live: (agent: Agent) => boolean = () => true): CallRecord[] {
    for (const agent of this.rings.keys()) if (agent && !live(agent)) this.rings.delete(agent)
    return [...this.rings.values()].flat().sort((a, b) => a.seq - b.seq)
  }
}
