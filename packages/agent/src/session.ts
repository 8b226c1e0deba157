// the agent loop: a user turn assembles the prompt and the wire tools, calls the model, runs its tool calls (honouring
// each call's execution mode), appends the results, and repeats until the model answers without tool calls or the
// step limit is reached.

import {
  type Agent,
  type ExecutionMode,
  emitEach,
  errorResult,
  listenersFor,
  messageOf,
  type PreparedCall,
  type PromptSection,
  Scheduler,
  type ToolResult,
} from '@faber/core'
import type { Context, Events } from 'cordis'
import { type CallEvent, CallLog } from './call-log.ts'
import { addUsage, type Message, type Model, ModelError, type ModelResponse, type RetryInfo, type ToolCall, type Usage } from './model.ts'
import { assemblePrompt, type Prompt } from './prompt.ts'
import type { RecordedCheckpoint } from './recorded-calls.ts'
import { conversationOf, type SessionLog } from './session-log.ts'

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
  | CallEvent
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

function toolMessage(call: ToolCall, result: ToolResult): ToolMessage {
  return result.isError
    ? { role: 'tool', toolCallId: call.id, name: call.name, content: result.content, isError: true }
    : { role: 'tool', toolCallId: call.id, name: call.name, content: result.content }
}

export class AgentSession {
  readonly messages: Message[] = []
  readonly agent?: Agent
  /** the session's id: from the log it continues, or new; the same across resumes of one log */
  readonly id: string
  turn = 0
  usage?: Usage
  private model: Model
  private busy = false
  private disposed = false
  /** run_code calls checkpointed when the log was last written, by call id: resume() runs them again */
  private waiting = new Map<string, RecordedCheckpoint>()
  private pendingCalls = new Map<string, ToolCall>()
  /** what this session's calls leave in its log, and the programs it held checkpointed */
  private calls: CallLog

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
    let interrupted: ToolMessage[] = []
    if (log && resumed) {
      const { messages, dangling } = conversationOf(log.records)
      this.turn = log.records.reduce((n, r) => (r.type === 'turn' ? Math.max(n, r.turn) : n), 0)
      this.messages.push(...messages)
      interrupted = dangling
      for (const record of log.records) if (record.type === 'model') this.usage = addUsage(this.usage, record.usage)
    }
    this.calls = new CallLog(ctx, { agent: this.agent, log, model: this.model.name, turn: () => this.turn, onEvent: (event) => this.emit(event) })
    this.id = this.calls.id
    if (log && resumed) {
      // a call left without a result is answered as interrupted, but a program checkpointed while it waited on a person
      const calls = new Map(this.messages.flatMap((m) => (m.role === 'assistant' ? (m.toolCalls ?? []) : [])).map((call) => [call.id, call]))
      interrupted = interrupted.filter((message) => {
        const checkpoint = this.calls.checkpointed.get(message.toolCallId)
        if (!checkpoint) return true
        this.waiting.set(message.toolCallId, checkpoint)
        this.pendingCalls.set(message.toolCallId, calls.get(message.toolCallId)!)
        return false
      })
      this.messages.push(...interrupted)
      for (const message of interrupted) log.append({ type: 'message', turn: this.turn, message })
    }
    if (log) ctx.emit('agent/session', { agent: this.agent, id: this.id, resumed })
  }

  private record(record: Parameters<SessionLog['append']>[0]) {
    this.options.log?.append(record)
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
    const results = await Promise.all(
      waiting.map(async (recorded) => {
        const call = this.pendingCalls.get(recorded.outerCallId)!
        const begin = performance.now()
        const result = await this.calls.again(recorded, signal)
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
    this.calls.clear()
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
      this.calls.begin(call, { step, mode })
      this.emit({ type: 'call-start', turn, call, mode })
      const begin = performance.now()
      const task = prepared.run(signal).then((result) => {
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
        this.calls.begin(call, { step, mode: 'none' })
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
    this.calls.end(call, result, durationMs)
    this.emit({ type: 'call-end', turn, call, result, durationMs })
  }

  /** stops listening; the log stays open (close it yourself) */
  dispose() {
    if (this.disposed) return
    this.disposed = true
    this.calls.dispose()
    this.ctx.emit('agent/session-end', { agent: this.agent, id: this.id })
  }
}
