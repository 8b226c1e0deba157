// the calls of a session, written to its log by one writer: each direct call and its result, the nested calls of a
// run_code program and their results, approval questions and answers, and, once a program is checkpointed while it
// waits on a person, its journal with a synced start mark before each body. it also runs again the programs the log
// holds checkpointed. AgentSession and the MCP server (faber mcp --session-log) both write through it

import {
  type Agent,
  type CodeCheckpoint,
  canonicalJson,
  type ExecutionMode,
  errorResult,
  type Json,
  messageOf,
  type NestedCallSettle,
  type NestedCallStart,
  type ToolResult,
} from '@faber/core'
import type { Context, Events } from 'cordis'
import type { ToolCall } from './model.ts'
import { checkpointsOf, type RecordedCheckpoint } from './recorded-calls.ts'
import { type CallOutcome, LOG_VERSION, type NewRecord, type SessionLog } from './session-log.ts'

/** what a CallLog tells as it records: a nested call started or settled, an approval asked or decided */
export type CallEvent =
  | { type: 'nested-start'; turn: number; event: NestedCallStart }
  | { type: 'nested-end'; turn: number; event: NestedCallSettle }
  | { type: 'approval'; turn: number; event: string; detail: Record<string, unknown> }

export interface CallLogOptions {
  agent?: Agent
  /** the log to write; without one, nothing is recorded and nothing is checkpointed durably */
  log?: SessionLog
  /** the model named by a new log's session record */
  model: string
  /** the turn records are written under now */
  turn(): number
  /** told as it records; it must not throw (AgentSession's catches what its own callback throws) */
  onEvent?(event: CallEvent): void
}

const APPROVAL_EVENTS = ['approval/asked', 'approval/decided'] as const

/** a JSON-safe projection of an event payload: agents become names, signals and functions are dropped */
function project(value: unknown, depth = 0): unknown {
  if (value === null || typeof value !== 'object') return typeof value === 'function' || typeof value === 'symbol' ? undefined : value
  if (depth > 4) return '…'
  if (value instanceof AbortSignal) return undefined
  if (typeof (value as { name?: unknown }).name === 'string' && 'chain' in (value as object)) return (value as { name: string }).name
  if (Array.isArray(value)) return value.map((v) => project(v, depth + 1))
  const out: Record<string, unknown> = {}
  for (const [key, v] of Object.entries(value)) {
    if (key === 'ctx' || key === 'token' || key === 'signal') continue
    const projected = project(v, depth + 1)
    if (projected !== undefined) out[key] = projected
  }
  return out
}

function outcomeOf(result: ToolResult, durationMs: number): CallOutcome {
  const trace = result.trace?.map((s) => ({ ...s }))
  if (!result.isError) return { isError: false, value: result.value, trace, durationMs }
  const { code, toolCode, deniedBy, withheldBy } = result.error
  return { isError: true, code, toolCode, deniedBy: deniedBy && { ...deniedBy }, withheldBy: withheldBy && { ...withheldBy }, trace, durationMs }
}

/** a call's arguments as canonical JSON (left out: {}); undefined when they are not JSON */
function canonicalOf(args: unknown): string | undefined {
  try {
    return canonicalJson((args ?? {}) as Json)
  } catch {
    return undefined
  }
}

export class CallLog {
  /** the session's id: from the log it continues, or new */
  readonly id: string
  /**
   * the run_code programs the log held checkpointed, with no result, when it was opened, oldest first: each runs again
   * through again(), at most once
   */
  readonly checkpointed: Map<string, RecordedCheckpoint>
  private disposers: (() => void)[] = []
  /** direct calls now running: nested events are matched to them */
  private inflight = new Set<string>()
  private nested = new Set<string>()
  /** the journals of the calls running again, for code/resume */
  private resuming = new Map<string, CodeCheckpoint>()
  /** run_code calls whose journal is durable: a nested call of one is marked started on disk before its body runs */
  private durable = new Set<string>()
  private unmark?: () => void
  /** nested calls waiting on an approval now: at a checkpoint, their bodies have not started */
  private asking = new Set<string>()

  /** a log that held a session is continued (a `resume` record); a new one begins with a `session` record */
  constructor(
    private ctx: Context,
    private options: CallLogOptions,
  ) {
    const log = options.log
    const resumed = log?.resumed === true
    this.checkpointed = log && resumed ? checkpointsOf(log.records, log.path) : new Map()
    const begun = log?.records.find((record) => record.type === 'session')
    this.id = begun?.type === 'session' ? begun.id : `${Date.now().toString(36)}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`
    if (log && resumed) log.append({ type: 'resume', turns: options.turn(), skipped: log.truncated })
    if (log && !resumed) log.append({ type: 'session', version: LOG_VERSION, id: this.id, agent: options.agent?.name, model: options.model })
    this.listen()
  }

  /** the agent whose calls it records; undefined for the global view */
  get agent(): Agent | undefined {
    return this.options.agent
  }

  private get scope(): Context {
    return this.options.agent?.ctx ?? this.ctx
  }

  private mine(agent: Agent | undefined, outerCallId: string) {
    return agent === this.options.agent && this.inflight.has(outerCallId)
  }

  private listen() {
    const scope = this.scope
    this.disposers.push(
      scope.on('code/call-start', (event) => {
        if (!this.mine(event.agent, event.outerCallId)) return
        this.nested.add(event.callId)
        this.record({
          type: 'nested-call',
          turn: this.options.turn(),
          outerCallId: event.outerCallId,
          callId: event.callId,
          name: event.name,
          arguments: event.arguments,
          ...(event.site ? { site: { line: event.site.line, column: event.site.column } } : {}),
        })
        this.options.onEvent?.({ type: 'nested-start', turn: this.options.turn(), event })
      }),
      scope.on('code/call-settle', (event) => {
        if (!this.mine(event.agent, event.outerCallId)) return
        this.record({
          type: 'nested-result',
          turn: this.options.turn(),
          ...this.nestedResult(event.outerCallId, event.callId, event.name, event.result, event.durationMs),
        })
        this.options.onEvent?.({ type: 'nested-end', turn: this.options.turn(), event })
      }),
      // a checkpointed program's journal, durably: a new process runs it again from the log
      scope.on('code/journal', ({ outerCallId, agent, change }) => {
        if (!this.mine(agent, outerCallId)) return
        const { kind, ...rest } = change
        if (kind === 'checkpoint') {
          // a call still running then may have started its body, but for one still waiting on an approval
          const running = change.calls.flatMap((call) => (!call.reply && call.callId && !this.asking.has(call.callId) ? [call.callId] : []))
          this.record({ type: 'checkpoint', turn: this.options.turn(), outerCallId, ...(rest as CodeCheckpoint), running })
          this.markStarts(outerCallId)
          // on disk before the program's unit is gone: a restart from here finds it
          this.options.log?.flush().catch((error) => this.ctx.root.logger('agent').warn('writing a checkpoint failed: %s', messageOf(error)))
        } else this.record({ type: 'journal', turn: this.options.turn(), outerCallId, ...rest })
      }),
      scope.on('code/resume', (exec) => (exec.agent === this.options.agent && !exec.parent ? this.resuming.get(exec.callId) : undefined)),
      // a nested call that a code runtime made without announcing it still reaches the log
      scope.on('tools/result', (exec, result) => {
        if (!exec.parent || this.nested.has(exec.callId) || !this.mine(exec.agent, exec.rootCallId)) return
        this.record({ type: 'nested-result', turn: this.options.turn(), ...this.nestedResult(exec.rootCallId, exec.callId, exec.name, result, 0) })
      }),
    )
    for (const event of APPROVAL_EVENTS) {
      const listener = (...args: unknown[]) => this.approval(event, args[0])
      this.disposers.push(scope.on(event as keyof Events, listener as never))
    }
  }

  private nestedResult(outerCallId: string, callId: string, name: string, result: ToolResult, durationMs: number) {
    return { outerCallId, callId, name, content: result.content, ...outcomeOf(result, durationMs) }
  }

  private approval(event: string, payload: unknown) {
    const request = payload as { agent?: Agent; callId?: unknown; tool?: unknown; exec?: { rootCallId?: string } }
    const callId = typeof request?.callId === 'string' ? request.callId : undefined
    if (!callId || request.agent !== this.options.agent) return
    // a nested call was announced on code/call-start before any approval could be asked for it
    if (!this.inflight.has(callId) && !this.nested.has(callId) && !this.inflight.has(request.exec?.rootCallId ?? '')) return
    if (event === 'approval/asked') this.asking.add(callId)
    else this.asking.delete(callId)
    const detail = project(payload) as Record<string, unknown>
    const tool = typeof request.tool === 'string' ? request.tool : undefined
    this.record({ type: 'approval', turn: this.options.turn(), event, callId, tool, detail })
    this.options.onEvent?.({ type: 'approval', turn: this.options.turn(), event, detail })
  }

  private record(record: NewRecord) {
    this.options.log?.append(record)
  }

  /** a new turn: the nested calls of the last one are forgotten */
  clear() {
    this.nested.clear()
  }

  /**
   * a direct call starts: recorded (`session`: the conversation it came in on, when one agent serves several), and its
   * nested calls, approvals and journal are recorded under it until end()
   */
  begin(call: ToolCall, at: { step: number; mode: ExecutionMode | 'none'; session?: string }) {
    this.record({ type: 'call', turn: this.options.turn(), step: at.step, call, mode: at.mode, ...(at.session !== undefined ? { session: at.session } : {}) })
    this.inflight.add(call.id)
  }

  /**
   * a direct call's result, recorded; its start marks end. a checkpointed program's result is on disk when this
   * resolves: told to its caller before that, a crash would leave it checkpointed, to run again from the log
   */
  async end(call: { id: string; name: string }, result: ToolResult, durationMs: number): Promise<void> {
    this.inflight.delete(call.id)
    const durable = this.durable.has(call.id)
    this.endStarts(call.id)
    this.record({ type: 'result', turn: this.options.turn(), callId: call.id, name: call.name, ...outcomeOf(result, durationMs) })
    if (durable) await this.options.log?.flush().catch((error) => this.ctx.root.logger('agent').warn('writing a result failed: %s', messageOf(error)))
  }

  /**
   * the caller of a program checkpointed in the log went away, not its person (the server stops, the connection
   * closed): nothing more is recorded under it, so it stays in the log as it is, to run again when called again; the
   * caller records no end for it. false, and nothing done, for a call that is not such a program
   */
  leave(callId: string): boolean {
    if (!this.durable.has(callId) || !this.inflight.delete(callId)) return false
    this.endStarts(callId)
    return true
  }

  /**
   * the oldest program the log holds checkpointed that a call of `name` with these arguments (equal as canonical JSON)
   * would run again, taken: no other call takes it. undefined when none
   */
  take(name: string, args: unknown): RecordedCheckpoint | undefined {
    // most calls meet an empty map: no canonical JSON of their arguments
    if (!this.checkpointed.size) return undefined
    const wanted = canonicalOf(args)
    if (wanted === undefined) return undefined
    for (const [id, recorded] of this.checkpointed) {
      if (recorded.name !== name || canonicalOf(recorded.arguments) !== wanted) continue
      this.checkpointed.delete(id)
      return recorded
    }
  }

  /**
   * runs a program the log held checkpointed again, under its own call id (record its result with end()): the calls
   * it made are answered from the log, the one it waited on is asked again. one with a call that may have run (let
   * through, with no result) is not run again: its result says so
   */
  async again(recorded: RecordedCheckpoint, signal: AbortSignal): Promise<ToolResult> {
    const { outerCallId, checkpoint, unsure, session } = recorded
    if (unsure.length) {
      const which = unsure.map((c) => `tools.${c.name}(${c.arguments.length > 80 ? `${c.arguments.slice(0, 79)}…` : c.arguments})`).join(', ')
      return errorResult(
        'CODE_RUN_FAILED',
        `run_code failed (interrupted): the session stopped while ${which} was running, after it was let through; it may or may not have run, so the program was not run again. Check what it did before running the program again`,
        { kind: 'crash' },
      )
    }
    this.resuming.set(outerCallId, checkpoint)
    this.markStarts(outerCallId)
    this.inflight.add(outerCallId)
    try {
      // in the conversation it was made in: a question it left in the store is that conversation's
      const { name, arguments: args } = recorded
      return await this.ctx.tools.executor.execute({ callId: outerCallId, name, arguments: args, agent: this.options.agent, signal, session })
    } finally {
      this.inflight.delete(outerCallId)
      this.resuming.delete(outerCallId)
    }
  }

  /**
   * from now on, each nested call of this checkpointed program is marked started in the log, synced, before its body
   * runs: after a restart, a call with a mark and no result may have run, and one without never did (a tools/execute
   * wrapper, there only while such a program runs; a log that cannot be written stops the body, failing closed)
   */
  private markStarts(outerCallId: string) {
    const log = this.options.log
    if (!log) return
    this.durable.add(outerCallId)
    this.unmark ??= this.scope.on('tools/execute', async (exec, next) => {
      if (!exec.parent || !this.durable.has(exec.rootCallId)) return next()
      this.record({ type: 'journal', turn: this.options.turn(), outerCallId: exec.rootCallId, started: exec.callId })
      await log.flush()
      return next()
    })
  }

  private endStarts(outerCallId: string) {
    if (!this.durable.delete(outerCallId) || this.durable.size) return
    this.unmark?.()
    this.unmark = undefined
  }

  /** stops listening; the log stays open (close it yourself) */
  dispose() {
    for (const dispose of this.disposers.splice(0)) dispose()
    this.unmark?.()
    this.unmark = undefined
  }
}
