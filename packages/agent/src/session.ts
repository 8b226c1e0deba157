// the agent loop: a user turn assembles the prompt and the wire tools, calls the model, runs its tool calls (honouring
// each call's execution mode), appends the results, and repeats until the model answers without tool calls or the
// step limit is reached.

import {
  type Agent,
  type CodeCheckpoint,
  type ExecutionMode,
  emitEach,
  errorResult,
  listenersFor,
  messageOf,
  type NestedCallSettle,
  type NestedCallStart,
  type PreparedCall,
  type PromptSection,
  Scheduler,
  type ToolResult,
} from '@faber/core'
import type { Context, Events } from 'cordis'
import { addUsage, type Message, type Model, ModelError, type ModelResponse, type RetryInfo, type ToolCall, type Usage } from './model.ts'
import { assemblePrompt, type Prompt } from './prompt.ts'
import { checkpointsOf, type RecordedCheckpoint } from './recorded-calls.ts'
import { type CallOutcome, conversationOf, LOG_VERSION, type SessionLog } from './session-log.ts'

declare module 'cordis' {
  interface Events {
    /** the loop is about to call the model (observers such as @faber/plugin-otel open a span on it) */
    'agent/model-request'(request: ModelRequestInfo): void
    /** that model call returned (`error` unset) or failed; `request` is the object the request event carried */
    'agent/model-response'(response: ModelResponseInfo): void
  }
}

export interface ModelRequestInfo {
  agent?: Agent
  /** the session's id */
  session: string
  turn: number
  step: number
  model: string
}

export interface ModelResponseInfo {
  request: ModelRequestInfo
  durationMs: number
  usage?: Usage
  finishReason?: string
  /** tool calls the model asked for */
  toolCalls: number
  /** why the call failed; unset when it returned */
  error?: string
  aborted?: boolean
}

export type StopReason = 'done' | 'max-steps' | 'aborted'

export interface TurnOutcome {
  turn: number
  reason: StopReason
  /** the model's last text */
  text: string
  /** model calls made in this turn */
  steps: number
  usage?: Usage
}

export type SessionEvent =
  | { type: 'turn-start'; turn: number; user: string }
  | { type: 'model-start'; turn: number; step: number }
  | { type: 'text'; turn: number; step: number; delta: string }
  | { type: 'model-end'; turn: number; step: number; response: ModelResponse; durationMs: number }
  | { type: 'call-start'; turn: number; call: ToolCall; mode: 'parallel' | 'exclusive' | 'none' }
  | { type: 'call-end'; turn: number; call: ToolCall; result: ToolResult; durationMs: number }
  | { type: 'nested-start'; turn: number; event: NestedCallStart }
  | { type: 'nested-end'; turn: number; event: NestedCallSettle }
  | { type: 'approval'; turn: number; event: string; detail: Record<string, unknown> }
  | { type: 'retry'; turn: number; step: number; retry: RetryInfo }
  | { type: 'turn-end'; outcome: TurnOutcome }

export interface AgentSessionOptions {
  model: Model
  /** the agent this session speaks for; undefined for the global layer */
  agent?: Agent
  persona?: string
  /** runtime context for the prompt (order 300) */
  context?: string
  sections?: PromptSection[]
  /** model calls per user turn (default 24) */
  maxSteps?: number
  /** concurrency-safe calls of one model turn that may overlap (default 8) */
  maxParallel?: number
  /** a log to append to; a log that already holds a session is continued from where it ended */
  log?: SessionLog
  onEvent?(event: SessionEvent): void
}

type ToolMessage = Extract<Message, { role: 'tool' }>

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

function toolMessage(call: ToolCall, result: ToolResult): ToolMessage {
  return result.isError
    ? { role: 'tool', toolCallId: call.id, name: call.name, content: result.content, isError: true }
    : { role: 'tool', toolCallId: call.id, name: call.name, content: result.content }
}

function parseArguments(text: string): unknown {
  try {
    return text.trim() ? JSON.parse(text) : {}
  } catch {
    return {}
  }
}

function outcomeOf(result: ToolResult, durationMs: number): CallOutcome {
  const trace = result.trace?.map((s) => ({ ...s }))
  if (!result.isError) return { isError: false, value: result.value, trace, durationMs }
  const { code, toolCode, deniedBy, withheldBy } = result.error
  return { isError: true, code, toolCode, deniedBy: deniedBy && { ...deniedBy }, withheldBy: withheldBy && { ...withheldBy }, trace, durationMs }
}

export class AgentSession {
  readonly messages: Message[] = []
  readonly agent?: Agent
  /** the session's id: from the log it continues, or new; the same across resumes of one log */
  readonly id: string
  turn = 0
  usage?: Usage
  private model: Model
  private disposers: (() => void)[] = []
  /** direct calls of this session now running: nested events are matched to them */
  private inflight = new Set<string>()
  private nested = new Set<string>()
  private busy = false
  /** run_code calls checkpointed when the log was last written, by call id: resume() runs them again */
  private waiting = new Map<string, RecordedCheckpoint>()
  private pendingCalls = new Map<string, ToolCall>()
  /** the journals of the calls resume() is running again, for code/resume */
  private resuming = new Map<string, CodeCheckpoint>()
  /** run_code calls whose journal is durable: a nested call of one is marked started on disk before its body runs */
  private durable = new Set<string>()
  private unmark?: () => void
  /** nested calls waiting on an approval now: at a checkpoint, their bodies have not started */
  private asking = new Set<string>()

  constructor(
    private ctx: Context,
    private options: AgentSessionOptions,
  ) {
    if (!options?.model || typeof options.model.complete !== 'function') throw new TypeError('AgentSession: options.model must be a Model ({ name, complete })')
    if (!ctx.get('tools')) throw new TypeError('AgentSession: no ToolRuntime is mounted at ctx.tools; load @faber/core first')
    this.model = options.model
    this.agent = options.agent
    const log = options.log
    const resumed = log?.resumed === true
    if (log && resumed) {
      const { messages, dangling } = conversationOf(log.records)
      this.turn = log.records.reduce((n, r) => (r.type === 'turn' ? Math.max(n, r.turn) : n), 0)
      // a call left without a result is answered as interrupted, but a program checkpointed while it waited on a person
      const checkpoints = checkpointsOf(log.records)
      const calls = new Map(messages.flatMap((m) => (m.role === 'assistant' ? (m.toolCalls ?? []) : [])).map((call) => [call.id, call]))
      const interrupted = dangling.filter((message) => {
        const checkpoint = checkpoints.get(message.toolCallId)
        if (!checkpoint) return true
        this.waiting.set(message.toolCallId, checkpoint)
        this.pendingCalls.set(message.toolCallId, calls.get(message.toolCallId)!)
        return false
      })
      this.messages.push(...messages, ...interrupted)
      for (const record of log.records) if (record.type === 'model') this.usage = addUsage(this.usage, record.usage)
      log.append({ type: 'resume', turns: this.turn, skipped: log.truncated })
      for (const message of interrupted) log.append({ type: 'message', turn: this.turn, message })
    }
    const begun = log?.records.find((record) => record.type === 'session')
    this.id = begun?.type === 'session' ? begun.id : `${Date.now().toString(36)}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`
    if (log && !resumed) log.append({ type: 'session', version: LOG_VERSION, id: this.id, agent: this.agent?.name, model: this.model.name })
    this.listen()
    if (log) ctx.emit('agent/session', { agent: this.agent, id: this.id, resumed })
  }

  private get scope(): Context {
    return this.agent?.ctx ?? this.ctx
  }

  private mine(agent: Agent | undefined, outerCallId: string) {
    return agent === this.agent && this.inflight.has(outerCallId)
  }

  private listen() {
    const scope = this.scope
    this.disposers.push(
      scope.on('code/call-start', (event) => {
        if (!this.mine(event.agent, event.outerCallId)) return
        this.nested.add(event.callId)
        this.record({
          type: 'nested-call',
          turn: this.turn,
          outerCallId: event.outerCallId,
          callId: event.callId,
          name: event.name,
          arguments: event.arguments,
          ...(event.site ? { site: { line: event.site.line, column: event.site.column } } : {}),
        })
        this.emit({ type: 'nested-start', turn: this.turn, event })
      }),
      scope.on('code/call-settle', (event) => {
        if (!this.mine(event.agent, event.outerCallId)) return
        this.record({
          type: 'nested-result',
          turn: this.turn,
          ...this.nestedResult(event.outerCallId, event.callId, event.name, event.result, event.durationMs),
        })
        this.emit({ type: 'nested-end', turn: this.turn, event })
      }),
      // a checkpointed program's journal, durably: a new process runs it again from the log
      scope.on('code/journal', ({ outerCallId, agent, change }) => {
        if (!this.mine(agent, outerCallId)) return
        const { kind, ...rest } = change
        if (kind === 'checkpoint') {
          // a call still running then may have started its body, but for one still waiting on an approval
          const running = change.calls.flatMap((call) => (!call.reply && call.callId && !this.asking.has(call.callId) ? [call.callId] : []))
          this.record({ type: 'checkpoint', turn: this.turn, outerCallId, ...(rest as CodeCheckpoint), running })
          this.markStarts(outerCallId)
          // on disk before the program's unit is gone: a restart from here finds it
          this.options.log?.flush().catch((error) => this.ctx.root.logger('agent').warn('writing a checkpoint failed: %s', messageOf(error)))
        } else this.record({ type: 'journal', turn: this.turn, outerCallId, ...rest })
      }),
      scope.on('code/resume', (exec) => (exec.agent === this.agent && !exec.parent ? this.resuming.get(exec.callId) : undefined)),
      // a nested call that a code runtime made without announcing it still reaches the log
      scope.on('tools/result', (exec, result) => {
        if (!exec.parent || this.nested.has(exec.callId) || !this.mine(exec.agent, exec.rootCallId)) return
        this.record({ type: 'nested-result', turn: this.turn, ...this.nestedResult(exec.rootCallId, exec.callId, exec.name, result, 0) })
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
    if (!callId || request.agent !== this.agent) return
    // a nested call was announced on code/call-start before any approval could be asked for it
    if (!this.inflight.has(callId) && !this.nested.has(callId) && !this.inflight.has(request.exec?.rootCallId ?? '')) return
    if (event === 'approval/asked') this.asking.add(callId)
    else this.asking.delete(callId)
    const detail = project(payload) as Record<string, unknown>
    const tool = typeof request.tool === 'string' ? request.tool : undefined
    this.record({ type: 'approval', turn: this.turn, event, callId, tool, detail })
    this.emit({ type: 'approval', turn: this.turn, event, detail })
  }

  private record(record: Parameters<SessionLog['append']>[0]) {
    this.options.log?.append(record)
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
      this.record({ type: 'journal', turn: this.turn, outerCallId: exec.rootCallId, started: exec.callId })
      await log.flush()
      return next()
    })
  }

  private endStarts(outerCallId: string) {
    if (!this.durable.delete(outerCallId) || this.durable.size) return
    this.unmark?.()
    this.unmark = undefined
  }

  /**
   * tells the listeners of the session's agent chain (and global ones), each isolated from the others: one that throws
   * or rejects is logged and ignored. here and below, what a listener threw is read with messageOf: the logger's %s of a
   * value with no prototype throws
   */
  private observe<K extends 'agent/model-request' | 'agent/model-response' | 'agent/turn'>(event: K, payload: Parameters<Events[K]>[0]) {
    const failed = (plugin: string, error: unknown) =>
      this.ctx.root.logger('agent').warn('an %s listener of plugin "%s" threw (ignored): %s', event, plugin, messageOf(error))
    emitEach(listenersFor(this.ctx, event, this.agent), [payload], failed)
  }

  private emit(event: SessionEvent) {
    try {
      this.options.onEvent?.(event)
    } catch (error) {
      this.ctx.root.logger('agent').warn('a session onEvent callback threw (ignored): %s', messageOf(error))
    }
  }

  /** the system prompt this session's next model call would get */
  prompt(): Prompt {
    const { persona, context, sections } = this.options
    return assemblePrompt(this.ctx, this.agent, { persona, context, sections })
  }

  /** one user turn: runs until the model answers without tool calls, the step limit, or an abort */
  async send(user: string, options: { signal?: AbortSignal } = {}): Promise<TurnOutcome> {
    if (this.busy) throw new Error('AgentSession.send: a turn is already running; await it first')
    // a program checkpointed before a restart is answered first: the model's last turn still waits for its result
    if (this.waiting.size) await this.resume(options)
    const signal = options.signal ?? new AbortController().signal
    const turn = ++this.turn
    return this.loop(turn, signal, () => {
      this.observe('agent/turn', { agent: this.agent, turn })
      this.record({ type: 'turn', turn })
      this.emit({ type: 'turn-start', turn, user })
      this.push({ role: 'user', content: user })
    })
  }

  /** the run_code calls of the log's last turn that were checkpointed, waiting on a person, when the session stopped */
  get checkpointed(): string[] {
    return [...this.waiting.keys()]
  }

  /**
   * runs again each program the log holds checkpointed (its calls recorded are answered from the log, the one it waited
   * on is asked again), then goes on with the model's turn that was waiting for them. undefined when none was
   */
  async resume(options: { signal?: AbortSignal } = {}): Promise<TurnOutcome | undefined> {
    if (this.busy) throw new Error('AgentSession.resume: a turn is already running; await it first')
    if (!this.waiting.size) return undefined
    const signal = options.signal ?? new AbortController().signal
    const waiting = [...this.waiting.values()]
    this.waiting.clear()
    return this.loop(this.turn, signal, () => this.runAgain(waiting, signal))
  }

  private async runAgain(waiting: RecordedCheckpoint[], signal: AbortSignal) {
    const tools = this.ctx.tools.executor
    const results = await Promise.all(
      waiting.map(async ({ outerCallId, checkpoint, unsure }) => {
        const call = this.pendingCalls.get(outerCallId)!
        const begin = performance.now()
        let result: ToolResult
        if (unsure.length) {
          const which = unsure.map((c) => `tools.${c.name}(${c.arguments.length > 80 ? `${c.arguments.slice(0, 79)}…` : c.arguments})`).join(', ')
          result = errorResult(
            'CODE_RUN_FAILED',
            `run_code failed (interrupted): the session stopped while ${which} was running, after it was let through; it may or may not have run, so the program was not run again. Check what it did before running the program again`,
            { kind: 'crash' },
          )
        } else {
          this.resuming.set(outerCallId, checkpoint)
          this.markStarts(outerCallId)
          this.inflight.add(outerCallId)
          try {
            result = await tools.execute({ callId: outerCallId, name: call.name, arguments: parseArguments(call.arguments), agent: this.agent, signal })
          } finally {
            this.inflight.delete(outerCallId)
            this.resuming.delete(outerCallId)
          }
        }
        this.finished(this.turn, call, result, performance.now() - begin)
        return toolMessage(call, result)
      }),
    )
    for (const message of results) this.push(message)
    await this.options.log?.flush()
  }

  /** one model turn from `begin` on: runs until the model answers without tool calls, the step limit, or an abort */
  private async loop(turn: number, signal: AbortSignal, begin: () => void | Promise<void>): Promise<TurnOutcome> {
    this.busy = true
    this.nested.clear()
    const maxSteps = this.options.maxSteps ?? 24
    const log = this.options.log
    let usage: Usage | undefined
    let text = ''
    let steps = 0
    let reason: StopReason = 'max-steps'
    try {
      await begin()
      while (steps < maxSteps) {
        if (signal.aborted) {
          reason = 'aborted'
          break
        }
        const step = ++steps
        const prompt = this.prompt()
        const wire = this.ctx.tools.wire(this.agent)
        this.emit({ type: 'model-start', turn, step })
        const begin = performance.now()
        const request: ModelRequestInfo = { agent: this.agent, session: this.id, turn, step, model: this.model.name }
        this.observe('agent/model-request', request)
        let response: ModelResponse
        try {
          response = await this.model.complete({
            messages: [{ role: 'system', content: prompt.text }, ...this.messages],
            tools: wire.tools,
            signal,
            onText: (delta) => this.emit({ type: 'text', turn, step, delta }),
            onRetry: (retry) => {
              const { attempt, maxAttempts, delayMs, reason, status } = retry
              this.record({ type: 'retry', turn, step, attempt, maxAttempts, delayMs, reason, status })
              this.emit({ type: 'retry', turn, step, retry })
            },
          })
        } catch (error) {
          const message = messageOf(error)
          this.observe('agent/model-response', { request, durationMs: performance.now() - begin, toolCalls: 0, error: message, aborted: signal.aborted })
          if (signal.aborted) {
            reason = 'aborted'
            break
          }
          throw error
        }
        const durationMs = performance.now() - begin
        usage = addUsage(usage, response.usage)
        this.usage = addUsage(this.usage, response.usage)
        const calls = this.normalizeCalls(response.toolCalls)
        this.record({ type: 'model', turn, step, model: this.model.name, usage: response.usage, finishReason: response.finishReason, durationMs })
        this.observe('agent/model-response', { request, durationMs, usage: response.usage, finishReason: response.finishReason, toolCalls: calls.length })
        this.emit({ type: 'model-end', turn, step, response: { ...response, toolCalls: calls }, durationMs })
        this.push(calls.length ? { role: 'assistant', content: response.text, toolCalls: calls } : { role: 'assistant', content: response.text })
        if (response.text) text = response.text
        if (!calls.length) {
          reason = 'done'
          break
        }
        const results = await this.runCalls(calls, turn, step, signal)
        for (const message of results) this.push(message)
        await log?.flush()
        if (signal.aborted) {
          reason = 'aborted'
          break
        }
      }
      const outcome: TurnOutcome = { turn, reason, text, steps, usage }
      this.record({ type: 'turn-end', turn, reason, steps, usage })
      await log?.flush()
      this.emit({ type: 'turn-end', outcome })
      return outcome
    } catch (error) {
      const partial = error instanceof ModelError ? error.partial : undefined
      this.record({ type: 'turn-end', turn, reason: 'error', steps, usage, error: messageOf(error), partial })
      await log?.flush().catch(() => {})
      throw error
    } finally {
      this.busy = false
    }
  }

  private push(message: Message) {
    this.messages.push(message)
    this.record({ type: 'message', turn: this.turn, message })
  }

  /** every call gets a unique, non-empty id, so each result answers exactly one call */
  private normalizeCalls(calls: ToolCall[]): ToolCall[] {
    const seen = new Set<string>()
    return calls.map((call, index) => {
      let id = typeof call.id === 'string' && call.id ? call.id : `call_${this.turn}_${index}`
      while (seen.has(id)) id = `${id}_${index}`
      seen.add(id)
      return { id, name: String(call.name), arguments: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments ?? {}) }
    })
  }

  /**
   * runs one model turn's calls: consecutive parallel calls overlap up to maxParallel, an exclusive call waits for
   * what runs and holds back what follows. results come back in the model's order. after an abort, calls not yet
   * started still go through the registry, which answers them ABORTED_BEFORE_DISPATCH.
   */
  private async runCalls(calls: ToolCall[], turn: number, step: number, signal: AbortSignal): Promise<ToolMessage[]> {
    const results: ToolResult[] = new Array(calls.length)
    const running = new Set<Promise<void>>()
    const scheduler = new Scheduler(Math.max(1, this.options.maxParallel ?? 8))
    const tools = this.ctx.tools.executor

    const start = (index: number, prepared: PreparedCall, mode: ExecutionMode) => {
      const call = calls[index]
      this.record({ type: 'call', turn, step, call, mode })
      this.emit({ type: 'call-start', turn, call, mode })
      this.inflight.add(call.id)
      const begin = performance.now()
      const task = prepared.run(signal).then((result) => {
        this.inflight.delete(call.id)
        results[index] = result
        this.finished(turn, call, result, performance.now() - begin)
      })
      running.add(task)
      task.finally(() => {
        running.delete(task)
        scheduler.release(mode)
      })
      return task
    }

    for (const [index, call] of calls.entries()) {
      let args: unknown
      try {
        args = call.arguments.trim() ? JSON.parse(call.arguments) : {}
      } catch (error) {
        const result = errorResult(
          'INVALID_ARGUMENTS',
          `the arguments of "${call.name}" are not valid JSON (${(error as Error).message}); send one JSON object that matches the tool's parameters`,
        )
        this.record({ type: 'call', turn, step, call, mode: 'none' })
        this.emit({ type: 'call-start', turn, call, mode: 'none' })
        results[index] = result
        this.finished(turn, call, result, 0)
        continue
      }
      // one snapshot and validation per call: the mode is read from what the call will run with
      let prepared: PreparedCall
      try {
        prepared = tools.prepare({ callId: call.id, name: call.name, arguments: args, agent: this.agent })
      } catch (error) {
        prepared = { mode: 'exclusive', run: () => Promise.reject(error) }
      }
      const mode = prepared.mode
      await scheduler.acquire(mode)
      const task = start(index, prepared, mode)
      // an exclusive call also holds back what the loop records next
      if (mode === 'exclusive') await task
    }
    await Promise.all(running)
    return calls.map((call, index) => toolMessage(call, results[index]))
  }

  private finished(turn: number, call: ToolCall, result: ToolResult, durationMs: number) {
    this.endStarts(call.id)
    this.record({ type: 'result', turn, callId: call.id, name: call.name, ...outcomeOf(result, durationMs) })
    this.emit({ type: 'call-end', turn, call, result, durationMs })
  }

  /** stops listening; the log stays open (close it yourself) */
  dispose() {
    if (!this.disposers.length) return
    for (const dispose of this.disposers.splice(0)) dispose()
    this.unmark?.()
    this.unmark = undefined
    this.ctx.emit('agent/session-end', { agent: this.agent, id: this.id })
  }
}
