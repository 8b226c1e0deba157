// questions to a person that are not approvals: an imported MCP server's `elicitation/create` form. They go to the
// same answerers as approvals (listeners on `approval/elicit`, in order, agent-scoped), under a deadline, and end in
// an audit event. The answer is MCP's: accept with content, decline, or cancel.

import { type Agent, type Execution, emitEach, firstAnswer, type Json, messageOf } from '@faber/core'
import type { Events, Logger } from 'cordis'
import type { ListenersFor } from './broker.ts'

/** one field of a form: MCP elicitation allows flat primitive fields only */
export interface ElicitationField {
  type: 'string' | 'number' | 'integer' | 'boolean'
  title?: string
  description?: string
  default?: string | number | boolean
  enum?: string[]
  /** titled choices (`oneOf: [{ const, title }]`), as MCP 2025-11-25 writes enums */
  oneOf?: { const: string; title?: string }[]
  minimum?: number
  maximum?: number
  minLength?: number
  maxLength?: number
  format?: string
}

export interface ElicitationSchema {
  type: 'object'
  properties: Record<string, ElicitationField>
  required?: string[]
}

export interface ElicitationRequest {
  /** who asks: e.g. `mcp server "github"` */
  source: string
  message: string
  schema: ElicitationSchema
  /** the agent whose call the question came during, when one is known */
  agent?: Agent
  /** the tools of the calls in flight to the asking server when it asked */
  during?: string[]
  /**
   * those calls: an answerer that asks a person passes them to core's `waitOnPerson`, and the run_code programs that
   * made them stop their wall clocks until the person answered
   */
  calls?: readonly Execution[]
  signal: AbortSignal
}

export interface ElicitationQuery extends ElicitationRequest {
  readonly id: string
}

export type ElicitationContent = Record<string, string | number | boolean | string[]>

export type ElicitationAnswer = { action: 'accept'; content?: ElicitationContent; note?: string } | { action: 'decline' | 'cancel'; note?: string }

export interface ElicitationResult {
  action: 'accept' | 'decline' | 'cancel'
  content?: ElicitationContent
}

export interface ElicitationDecided {
  id: string
  agent?: Agent
  source: string
  message: string
  action: 'accept' | 'decline' | 'cancel'
  /** the answerer's plugin; `none` when nobody answered, `deadline` when time ran out, `caller` when cancelled */
  answeredBy: string
  /** the names of the fields answered (never their values: a form may ask for secrets) */
  fields: string[]
  /** which fields took the schema's default */
  defaulted: string[]
  note?: string
  durationMs: number
}

declare module 'cordis' {
  interface Events {
    /** answerers of forms: answer, or return nothing to let the next one answer; a throw or a malformed answer cancels */
    'approval/elicit'(query: ElicitationQuery): ElicitationAnswer | undefined | void | Promise<ElicitationAnswer | undefined | void>
    'approval/elicited'(event: ElicitationDecided): void
  }
}

/** why `value` does not fit `field`, or undefined */
export function fieldProblem(field: ElicitationField, value: unknown): string | undefined {
  if (field.type === 'boolean') return typeof value === 'boolean' ? undefined : 'expected true or false'
  if (field.type === 'number' || field.type === 'integer') {
    if (typeof value !== 'number' || !Number.isFinite(value)) return 'expected a number'
    if (field.type === 'integer' && !Number.isInteger(value)) return 'expected a whole number'
    if (field.minimum !== undefined && value < field.minimum) return `expected at least ${field.minimum}`
    if (field.maximum !== undefined && value > field.maximum) return `expected at most ${field.maximum}`
    return undefined
  }
  if (typeof value !== 'string') return 'expected text'
  const choices = field.enum ?? field.oneOf?.map((choice) => choice.const)
  if (choices && !choices.includes(value)) return `expected one of ${choices.join(', ')}`
  if (field.minLength !== undefined && value.length < field.minLength) return `expected at least ${field.minLength} characters`
  if (field.maxLength !== undefined && value.length > field.maxLength) return `expected at most ${field.maxLength} characters`
  return undefined
}

/**
 * an accepted answer made whole: fields the answerer left out take the schema's default (an answerer that accepts
 * without changes answers with the defaults), unknown fields are dropped; undefined content when a field is invalid
 * or a required one is missing, with the reason
 */
export function completeContent(schema: ElicitationSchema, content: Record<string, unknown> = {}) {
  const complete: ElicitationContent = {}
  const defaulted: string[] = []
  for (const [name, field] of Object.entries(schema.properties ?? {})) {
    let value = content[name]
    if (value === undefined && field.default !== undefined) {
      value = field.default
      defaulted.push(name)
    }
    if (value === undefined) {
      if (schema.required?.includes(name)) return { problem: `the required field "${name}" has no answer and no default`, defaulted }
      continue
    }
    const problem = fieldProblem(field, value)
    if (problem) return { problem: `field "${name}": ${problem}`, defaulted }
    complete[name] = value as string | number | boolean
  }
  return { content: complete, defaulted }
}

export class Elicitor {
  private sequence = 0

  constructor(
    private listeners: ListenersFor,
    private logger: Logger,
    private timeoutMs: () => number,
  ) {}

  async elicit(request: ElicitationRequest): Promise<ElicitationResult> {
    if (typeof request?.message !== 'string' || typeof request.schema !== 'object' || !(request.signal instanceof AbortSignal))
      throw new TypeError('approval.elicit: pass { source, message, schema, signal, agent?, during? }')
    const started = performance.now()
    // answerers see a signal that also fires at the deadline, so a prompt still open then is withdrawn
    const deadline = new AbortController()
    const signal = AbortSignal.any([request.signal, deadline.signal])
    const query: ElicitationQuery = Object.freeze({ ...request, signal, id: `elicitation-${++this.sequence}` })
    const verdict = await this.decide(query, request.signal, deadline)
    const fields = verdict.result.content ? Object.keys(verdict.result.content) : []
    this.audit(query.agent, {
      id: query.id,
      agent: query.agent,
      source: query.source,
      message: query.message,
      action: verdict.result.action,
      answeredBy: verdict.answeredBy,
      fields,
      defaulted: verdict.defaulted ?? [],
      note: verdict.note,
      durationMs: performance.now() - started,
    })
    return verdict.result
  }

  private async decide(query: ElicitationQuery, caller: AbortSignal, deadline: AbortController): Promise<Verdict> {
    if (caller.aborted) return { result: { action: 'cancel' }, answeredBy: 'caller' }
    const ms = this.timeoutMs()
    let timer: ReturnType<typeof setTimeout> | undefined
    let onAbort!: () => void
    const stop = new Promise<Verdict>((resolve) => {
      onAbort = () => resolve({ result: { action: 'cancel' }, answeredBy: 'caller' })
      caller.addEventListener('abort', onAbort, { once: true })
      timer = setTimeout(() => {
        resolve({ result: { action: 'cancel' }, answeredBy: 'deadline', note: `no answer within ${ms} ms` })
        deadline.abort()
      }, ms)
    })
    try {
      // a late answer loses the race and is discarded
      return await Promise.race([stop, this.ask(query)])
    } finally {
      clearTimeout(timer)
      caller.removeEventListener('abort', onAbort)
    }
  }

  private async ask(query: ElicitationQuery): Promise<Verdict> {
    const found = await firstAnswer(this.listeners('approval/elicit', query.agent), [query])
    if (!found) return { result: { action: 'cancel' }, answeredBy: 'none', note: 'no answerer answered' }
    const { plugin } = found
    if (found.failed) {
      this.logger.warn('the form answerer of plugin "%s" threw (cancelled): %s', plugin, messageOf(found.error))
      return { result: { action: 'cancel' }, answeredBy: plugin, note: `the answerer threw: ${messageOf(found.error)}` }
    }
    const answer = found.value as ElicitationAnswer
    if (answer.action === 'decline' || answer.action === 'cancel') return { result: { action: answer.action }, answeredBy: plugin, note: answer.note }
    if (answer.action !== 'accept')
      return { result: { action: 'cancel' }, answeredBy: plugin, note: `the answer was malformed: ${JSON.stringify(answer as Json)}` }
    const { content, defaulted, problem } = completeContent(query.schema, answer.content)
    if (!content) return { result: { action: 'cancel' }, answeredBy: plugin, defaulted, note: `the answer was not accepted: ${problem}` }
    return { result: { action: 'accept', content }, answeredBy: plugin, defaulted, note: answer.note }
  }

  private audit(agent: Agent | undefined, payload: Parameters<Events['approval/elicited']>[0]) {
    const failed = (plugin: string, error: unknown) =>
      this.logger.warn('an approval/elicited observer of plugin "%s" threw (ignored): %s', plugin, messageOf(error))
    emitEach(this.listeners('approval/elicited', agent), [payload], failed)
  }
}

interface Verdict {
  result: ElicitationResult
  answeredBy: string
  defaulted?: string[]
  note?: string
}
