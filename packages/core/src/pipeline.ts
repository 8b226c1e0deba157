// the execution pipeline, in DESIGN.md's order: create (through the collapse), pre-abort, tools/pre-execute,
// approval, guards, tools/execute around the body, tools/post-execute, finish. each stage either continues or
// produces the call's one result. the registry (runtime.ts) owns what is visible; this module owns what runs.

import type { Context, Events, Logger } from 'cordis'
import type { Agent } from './agent.ts'
import type { CallSite } from './code-runtime.ts'
import { collapses, type Mode } from './collapse.ts'
import { type EventListeners, isThenable, type Listener, type ListenerIndex, ownerOf } from './cordis.ts'
import { DeadlineQueue, formatDuration, TIMED_OUT, withDeadline } from './deadline.ts'
import { dispatch, emitEach } from './dispatch.ts'
import type { CallRequest, DispatchNext, ExecutionInput, Guard, PreparedCall } from './execution.ts'
import type { DeploymentHealth } from './health.ts'
import { adoptParsed, EMPTY_OBJECT, type Json, JsonError, snapshot } from './json.ts'
import { messageOf } from './message.ts'
import { callEnded } from './person-wait.ts'
import { type DeniedBy, errorResult, isToolResult, type Stage, type StageRecord, type ToolFailure, type ToolResult, ToolResultError } from './result.ts'
import type { ExecutionMode } from './scheduler.ts'
import { type CompiledTool, capContent, type Execution, ExecutionRecord, ExecutionToken, jsonText, liveExecutions, RUN_CODE } from './tool.ts'

/** what the pipeline needs of the registry */
export interface PipelineHost {
  view(agent: Agent | undefined): PipelineView
  guards(level: Agent | undefined): readonly { value: Guard; plugin: string }[] | undefined
  service<K extends 'approval' | 'codeRuntime'>(name: K): Context[K] | undefined
  checkAgent(agent: Agent | undefined, method: string): void
  log(): Logger
  /** how long a tools/pre-execute listener and an approval request may take before the call is denied */
  deadlines(): { preExecuteMs: number; postExecuteMs: number; approvalMs: number }
  /** the UNKNOWN_TOOL message of a collapsed call: the route through run_code */
  routeMessage(name: string, declared: boolean): string
  /** the deployment's listeners, per event and agent */
  readonly listeners: ListenerIndex
  /** whether every plugin of the deployment is in force */
  readonly health: DeploymentHealth
}

export interface PipelineView {
  mode: Mode
  tools: ReadonlyMap<string, CompiledTool>
}

/** what a name resolves to on the execute path: the definition a call may run, or why there is none */
export type Resolution = CompiledTool | 'collapsed' | 'unknown'

/** the first ask of the tools/pre-execute stage, for approval */
interface Ask {
  reason: string
  plugin: string
}

class Prepared implements PreparedCall {
  // set by resolveCall, from the constructor on (declared: no field to define first, per call)
  declare view: PipelineView
  declare tool: Resolution
  /** why the arguments do not match the definition's parameters */
  declare problem: string | undefined
  /** the definition `mode` was read for: the caller scheduled the call (overlapped it, or not) on its answer */
  scheduledFor?: Resolution

  constructor(
    private pipeline: Pipeline,
    readonly callId: string | undefined,
    readonly name: string,
    readonly parent: ExecutionToken | undefined,
    readonly agent: Agent | undefined,
    readonly session: string | undefined,
    readonly site: CallSite | undefined,
    readonly args: Json,
    readonly notJson: ToolFailure | undefined,
  ) {
    pipeline.resolveCall(this, pipeline.viewOf(agent))
  }

  get mode(): ExecutionMode {
    const tool = this.tool
    this.scheduledFor = tool
    if (typeof tool === 'string' || !tool.definition.isConcurrencySafe || this.notJson || this.problem !== undefined) return 'exclusive'
    try {
      return tool.definition.isConcurrencySafe(this.args) === true ? 'parallel' : 'exclusive'
    } catch {
      return 'exclusive'
    }
  }

  run(signal: AbortSignal): Promise<ToolResult> {
    return this.pipeline.run(this, signal)
  }

  /** run, with the result itself when nothing on the way was pending (the run_code bridge's nested calls) */
  settle(signal: AbortSignal): ToolResult | Promise<ToolResult> {
    return this.pipeline.settle(this, signal)
  }
}

/** a prepared call that can settle without a promise: what the run_code bridge holds */
export interface SettlingCall extends PreparedCall {
  settle(signal: AbortSignal): ToolResult | Promise<ToolResult>
}

// node makes each AbortSignal an EventTarget and then sets its prototype, which gives every signal a map of its own: a
// `signal.aborted` read at a site that has seen more than four signals (a process serving run_code makes one per run,
// an agent loop one per turn) goes megamorphic, and every later read there probes V8's stub cache and calls the getter
// out of line. the pipeline calls the getter itself, one known function V8 inlines at each of its sites
const abortedGetter = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'aborted')!.get!
function isAborted(signal: AbortSignal): boolean {
  return abortedGetter.call(signal)
}

// a participant's answer is plugin data: copy the fields once, so a getter, a proxy trap or a revoked proxy fails closed
// instead of rejecting execute, and describe a bad answer without trusting JSON.stringify on it
type Decision = { kind?: unknown; reason?: unknown; content?: unknown; value?: unknown; feedback?: unknown; hasValue: boolean }
function readDecision(decision: object): Decision | Error {
  try {
    const d = decision as Record<string, unknown>
    return { kind: d.kind, reason: d.reason, content: d.content, value: d.value, feedback: d.feedback, hasValue: 'value' in d }
  } catch (error) {
    return error instanceof Error ? error : new Error(messageOf(error))
  }
}

function shapeOf(value: unknown): string {
  try {
    return JSON.stringify(value)?.slice(0, 80) ?? String(value)
  } catch {
    return typeof value === 'object' ? 'an object that is not JSON' : typeof value
  }
}

/**
 * a result a wrapper or a body made, copied field by field once (a getter or a proxy trap answers once, and whatever
 * throws means there is no result), with no `deniedBy`: only the stage that denies names itself. undefined when it
 * is not a tool result
 */
function copyResult(value: unknown): ToolResult | undefined {
  try {
    if (typeof value !== 'object' || value === null) return undefined
    const { isError, error, value: json, content, meta } = value as Record<string, unknown>
    let copy: ToolResult
    if (isError === false && 'value' in value) copy = { isError, value: json as Json, content: content as string, meta: meta as ToolResult['meta'] }
    else if (isError === true && typeof error === 'object' && error !== null) {
      const { deniedBy: _, ...fields } = error as ToolFailure['error']
      copy = { isError, error: fields, content: content as string, meta: meta as ToolResult['meta'] }
    } else return undefined
    return isToolResult(copy) ? copy : undefined
  } catch {
    return undefined
  }
}

const EMPTY_TRACE: readonly StageRecord[] = Object.freeze([])
// a global call's agent chain: none, without an array per call
const NO_LINEAGE: readonly Agent[] = Object.freeze([])

/** a call left the pipeline: no nested call names it as its parent any more, and no person is waited on for it */
function ended(exec: ExecutionRecord) {
  liveExecutions.end(exec)
  if (exec.parent) callEnded(exec)
}

export class Pipeline {
  private sequence = 0
  /**
   * async tools/pre-execute and post-execute listeners are on the hot path: one timer serves all of a stage's
   * deadlines, one queue per listening stage, remade when the deployment's limit for that stage changes
   */
  private readonly deadlines: { preExecuteMs?: DeadlineQueue; postExecuteMs?: DeadlineQueue } = {}
  /** the last object value a nested call's default rendering stringified, and its text (see jsonOf) */
  private renderedValue: Json | undefined
  private renderedText = ''

  /** the listeners of each stage's event, global ones and those of an agent's chain, read when the stage is reached */
  private readonly stages: Record<'preExecute' | 'execute' | 'postExecute' | 'result', EventListeners>
  /** the listeners of the nested-call notices */
  private readonly notices: Record<'code/call-start' | 'code/call-settle', EventListeners>

  /** read on every call: while a plugin is not in force, no call gets past create */
  private readonly health: DeploymentHealth

  constructor(private host: PipelineHost) {
    const { listeners } = host
    this.health = host.health
    this.stages = {
      preExecute: listeners.event('tools/pre-execute'),
      execute: listeners.event('tools/execute'),
      postExecute: listeners.event('tools/post-execute'),
      result: listeners.event('tools/result'),
    }
    this.notices = { 'code/call-start': listeners.event('code/call-start'), 'code/call-settle': listeners.event('code/call-settle') }
  }

  /** what `agent` can see now */
  viewOf(agent: Agent | undefined): PipelineView {
    return this.host.view(agent)
  }

  /**
   * the one resolution on the execute path, through the collapse: the definition a call may run, `collapsed` for a
   * model-direct call under Code Mode that names anything but run_code, or `unknown`
   */
  resolveExecution(view: PipelineView, name: string, nested: boolean): Resolution {
    if (collapses(name, view.mode, nested)) return 'collapsed'
    return view.tools.get(name) ?? 'unknown'
  }

  /**
   * 1. create, the half that needs no signal: check the input, snapshot the arguments once as lossless JSON, resolve
   * the definition through the collapse and validate the arguments against it. the agent loop and the run_code bridge
   * read the call's execution mode from it before they schedule the call; `run(signal)` does the rest. `parsed`: the
   * arguments are fresh from JSON.parse and held by no one else (the run_code bridge's), so they are frozen in place
   */
  prepare(input: CallRequest, parsed = false): SettlingCall {
    if (typeof input !== 'object' || input === null) throw new TypeError('tools.execute: pass { callId, name, arguments, signal, agent?, parent? }')
    const { name, parent } = input
    if (typeof name !== 'string') throw new TypeError('tools.execute: name must be a string')
    if (parent !== undefined && !(parent instanceof ExecutionToken))
      throw new TypeError('tools.execute: parent must be an ExecutionToken minted by this registry')
    const outer = parent && this.liveOf(parent)
    // a nested sub-dispatch runs as its program's agent
    if (outer && input.agent !== undefined && input.agent !== outer.agent) {
      throw new TypeError(`tools.execute: a nested call runs as its program's agent (${outer.agent ?? 'global'}); leave agent out`)
    }
    const agent = input.agent ?? outer?.agent
    this.host.checkAgent(agent, 'execute')
    let args: Json = null
    let notJson: ToolFailure | undefined
    try {
      // left out, the arguments are {}: the snapshot of {}, frozen like any other
      args = input.arguments === undefined ? EMPTY_OBJECT : parsed ? adoptParsed(input.arguments, '$') : snapshot(input.arguments, '$')
    } catch (error) {
      if (!(error instanceof JsonError)) throw error
      notJson = errorResult('INVALID_ARGUMENTS', `arguments for "${name}" are not JSON: ${error.message}`)
    }
    if (input.session !== undefined && typeof input.session !== 'string') throw new TypeError('tools.execute: session must be a string')
    // a nested call belongs to its program's conversation
    return new Prepared(this, input.callId, name, parent, agent, outer ? outer.session : input.session, outer ? input.site : undefined, args, notJson)
  }

  /** resolves and validates a prepared call against `view` (again, when the tool set changed since) */
  resolveCall(call: Prepared, view: PipelineView) {
    call.view = view
    call.tool = this.resolveExecution(view, call.name, call.parent !== undefined)
    call.problem = call.notJson || typeof call.tool === 'string' ? undefined : call.tool.validateArguments(call.args, '$')
  }

  /**
   * 1. create, the rest: mint the execution for `signal`. a call whose arguments are not JSON, whose program has
   * settled, that collapsed, names no tool or has invalid arguments ends here, before any policy observes it.
   */
  private createExecution(call: Prepared, signal: AbortSignal): { exec: ExecutionRecord; failure?: ToolFailure; trace: StageRecord[] } {
    const { callId, name, parent, agent, session, site } = call
    if (typeof callId !== 'string') throw new TypeError('tools.execute: callId must be a string')
    if (!(signal instanceof AbortSignal)) {
      throw new TypeError('tools.execute: signal is required; pass an AbortSignal (new AbortController().signal when the call cannot be cancelled)')
    }
    const outer = parent && this.liveOf(parent)
    // a tool registered or removed between prepare and run: decide for what is there now
    const view = this.viewOf(agent)
    if (view !== call.view) this.resolveCall(call, view)
    const tool = call.tool
    // a call scheduled for another definition (overlapped with others on its isConcurrencySafe, say) does not run this one
    const rescheduled = call.scheduledFor !== undefined && typeof tool !== 'string' && tool !== call.scheduledFor
    const trace: StageRecord[] = []
    const exec = new ExecutionRecord(
      ++this.sequence,
      callId,
      name,
      call.args,
      agent,
      session,
      parent,
      site,
      outer?.rootCallId ?? callId,
      signal,
      // the resolved definition's, or (collapsed, unknown) what the view holds under the name
      (typeof tool === 'string' ? view.tools.get(name)?.info : tool.info) ??
        Object.freeze({ name, description: '', annotations: Object.freeze({}), plugin: '' }),
    )
    if (call.notJson) return { exec, failure: call.notJson, trace }
    if (parent !== undefined && !outer) {
      trace.push({ stage: 'create', decision: 'parent-settled', by: 'core' })
      const message = `the program that called "${name}" has already finished; nested calls must complete before run_code returns`
      return { exec, failure: errorResult('ABORTED_BEFORE_DISPATCH', message), trace }
    }
    if (tool === 'collapsed') {
      trace.push({ stage: 'create', decision: 'collapsed', by: 'core' })
      const route = errorResult('UNKNOWN_TOOL', this.host.routeMessage(name, view.tools.has(name)))
      return { exec, failure: isAborted(signal) ? this.abortedBeforeDispatch(name) : route, trace }
    }
    if (tool === 'unknown') {
      trace.push({ stage: 'create', decision: 'unknown', by: 'core' })
      return { exec, failure: errorResult('UNKNOWN_TOOL', this.unknownMessage(name, view)), trace }
    }
    if (rescheduled) {
      trace.push({ stage: 'create', decision: 'changed', by: 'core' })
      return { exec, failure: errorResult('UNKNOWN_TOOL', `tool "${name}" changed while this call waited; call it again`), trace }
    }
    if (call.problem === undefined) return { exec, trace }
    return { exec, failure: errorResult('INVALID_ARGUMENTS', `invalid arguments for "${name}": ${call.problem}. Fix the arguments and call again.`), trace }
  }

  /** runs one call through the whole pipeline; resolves with exactly one result and never rejects for a tool's failure */
  execute(input: ExecutionInput): Promise<ToolResult> {
    try {
      return this.prepare(input).run(input.signal)
    } catch (error) {
      return Promise.reject(error)
    }
  }

  /** stages 1 (the rest) to 9 of a prepared call */
  run(call: Prepared, signal: AbortSignal): Promise<ToolResult> {
    try {
      const settled = this.settle(call, signal)
      return settled instanceof Promise ? settled : Promise.resolve(settled)
    } catch (error) {
      return Promise.reject(error)
    }
  }

  /**
   * stages 1 (the rest) to 9, synchronous until a participant or the body is pending: a call that no listener and no
   * pending body holds up (most nested calls) settles without a promise. stages without participants are skipped
   * without an await; each stage reads its participants when it is reached, as it would after an await
   */
  settle(call: Prepared, signal: AbortSignal): ToolResult | Promise<ToolResult> {
    // 1. create
    const { exec, failure, trace } = this.createExecution(call, signal)
    if (!this.health.ok) return this.closed(call, exec, signal)
    if (failure) return this.finish(exec, failure, trace)
    // 2. pre-abort
    if (isAborted(signal)) return this.finish(exec, this.abortedBeforeDispatch(exec.name), trace)

    // between here and finish a nested call may name this execution as its parent (see liveOf)
    liveExecutions.start(exec, this)
    let settled: ToolResult | Promise<ToolResult>
    try {
      const deciders = this.stages.preExecute.for(exec.agent)
      settled = deciders.length ? this.decideThenDispatch(exec, deciders, trace, signal) : this.dispatchStages(exec, trace, signal)
    } catch (error) {
      ended(exec)
      throw error
    }
    if (settled instanceof Promise) return settled.finally(() => ended(exec))
    ended(exec)
    return settled
  }

  /**
   * 1. create, while a plugin of the deployment is not in force: every call ends as DEPLOYMENT_FAILED, naming the
   * plugin, before any policy or body sees it; while the plugin is still starting (waiting for a service, within the
   * grace) the call waits for the deployment to change and is decided again
   */
  private closed(call: Prepared, exec: ExecutionRecord, signal: AbortSignal): ToolResult | Promise<ToolResult> {
    const fault = this.health.closedBy()
    if (!fault) return this.settle(call, signal)
    if (fault.state === 'starting') {
      if (isAborted(signal)) return this.finish(exec, this.abortedBeforeDispatch(exec.name), [])
      return this.health.changed(signal).then(() => this.settle(call, signal))
    }
    // what create found (collapsed, unknown) is not why the call ends
    const closed: StageRecord[] = [{ stage: 'create', decision: 'deployment-failed', by: fault.plugin, reason: fault.reason }]
    return this.finish(exec, errorResult('DEPLOYMENT_FAILED', this.health.message(fault)), closed)
  }

  /** 3. tools/pre-execute and 4. approval, then the rest */
  private async decideThenDispatch(exec: Execution, deciders: readonly Listener[], trace: StageRecord[], signal: AbortSignal): Promise<ToolResult> {
    // 3. tools/pre-execute
    const decided = await this.preExecute(exec, deciders, trace)
    if (decided && 'isError' in decided) return this.finish(exec, decided, trace)
    // 4. approval
    const refused = decided ? await this.approval(exec, decided, trace) : undefined
    if (refused) return this.finish(exec, refused, trace)
    return this.dispatchStages(exec, trace, signal)
  }

  /** 5. guards, 6. tools/execute around 7. the body, then the rest */
  private dispatchStages(exec: Execution, trace: StageRecord[], signal: AbortSignal): ToolResult | Promise<ToolResult> {
    // 5. guards
    const guarded = this.runGuards(exec, trace)
    if (guarded) return this.finish(exec, guarded, trace)
    // 6. tools/execute around 7. the body
    const wrappers = this.stages.execute.for(exec.agent)
    const body = wrappers.length ? this.dispatch(exec, wrappers, trace) : this.dispatchToolBody(exec, signal)
    if (body instanceof Promise) return body.then((result) => this.review(exec, result, trace, signal))
    return this.review(exec, body, trace, signal)
  }

  /** 8. tools/post-execute and 9. finish, on the body's result */
  private review(exec: Execution, result: ToolResult, trace: StageRecord[], signal: AbortSignal): ToolResult | Promise<ToolResult> {
    if (isAborted(signal) && !result.isError) result = errorResult('ABORTED', `the call to "${exec.name}" was cancelled while it ran; its result was discarded`)
    // 8. tools/post-execute
    const reviewers = this.stages.postExecute.for(exec.agent)
    if (reviewers.length) return this.postExecute(exec, reviewers, result, trace).then((reviewed) => this.finish(exec, reviewed, trace))
    // 9. finish
    return this.finish(exec, result, trace)
  }

  /**
   * the execution of `token` while it is between create and finish: a nested call's parent must be one. only a token
   * this pipeline minted names one (a forged, copied or proxied token, or one of another runtime, names none)
   */
  private liveOf(token: ExecutionToken): Execution | undefined {
    return liveExecutions.of(token, this)
  }

  private abortedBeforeDispatch(name: string) {
    return errorResult('ABORTED_BEFORE_DISPATCH', `the call to "${name}" was cancelled before it started; nothing ran`)
  }

  private unknownMessage(name: string, view: PipelineView) {
    const names = [...view.tools.keys()].sort()
    const shown = names.length > 20 ? `${names.slice(0, 20).join(', ')}, ...` : names.join(', ') || 'none'
    return `unknown tool "${name}": no tool of that name is available here; available tools: ${shown}`
  }

  private denied(trace: StageRecord[], stage: Stage, plugin: string, message: string, decision = 'deny'): ToolFailure {
    trace.push({ stage, decision, by: plugin, reason: message })
    const deniedBy: DeniedBy = { stage, plugin }
    return errorResult('DENIED', message, { deniedBy })
  }

  private failedClosed(exec: Execution, trace: StageRecord[], stage: Stage, plugin: string, what: string, error: unknown) {
    this.host.log().warn('%s on "%s" failed closed: %s', what, exec.name, messageOf(error))
    return this.withheld(exec, trace, stage, plugin, 'failed-closed', `${what} failed (${messageOf(error)})`)
  }

  /**
   * a participant kept the call's result from the model: it failed closed, timed out or (post-execute) blocked; `why`
   * says how (a block's feedback as it is). before the body ran that is a denial. after, the call's effects may have
   * happened, and a model told it was denied would run it again: RESULT_WITHHELD says the tool ran
   */
  private withheld(exec: Execution, trace: StageRecord[], stage: Stage, plugin: string, decision: string, why: string): ToolFailure {
    const blocked = decision === 'block'
    if (!liveExecutions.ran(exec)) return this.denied(trace, stage, plugin, blocked ? why : `the call to "${exec.name}" was denied because ${why}`, decision)
    const message = blocked
      ? `"${exec.name}" ran, but plugin "${plugin}" withheld its result: ${why}`
      : `"${exec.name}" ran, but its result was withheld because ${why}; it may have taken effect, so check before calling it again`
    trace.push({ stage, decision, by: plugin, reason: message })
    return errorResult('RESULT_WITHHELD', message, { withheldBy: { stage, plugin } })
  }

  /** 3. tools/pre-execute: decisions only tighten (deny over ask over allow); the first ask goes on to approval */
  private async preExecute(exec: Execution, hooks: readonly Listener[], trace: StageRecord[]): Promise<ToolFailure | Ask | undefined> {
    let ask: Ask | undefined
    for (const answer of dispatch(hooks, [exec])) {
      const { plugin } = answer
      if (answer.failed) return this.failedClosed(exec, trace, 'pre-execute', plugin, `a tools/pre-execute listener of plugin "${plugin}"`, answer.error)
      let decision = answer.value
      try {
        if (isThenable(decision)) {
          const { limit, answer } = this.within('preExecuteMs', decision)
          decision = await answer
          if (decision === TIMED_OUT) {
            const message = `the call to "${exec.name}" was denied because a tools/pre-execute listener of plugin "${plugin}" did not answer within ${formatDuration(limit)}`
            this.host.log().warn('%s', message)
            return this.denied(trace, 'pre-execute', plugin, message, 'timed-out')
          }
        }
      } catch (error) {
        return this.failedClosed(exec, trace, 'pre-execute', plugin, `a tools/pre-execute listener of plugin "${plugin}"`, error)
      }
      if (decision === undefined || decision === null) continue
      const read = typeof decision === 'object' ? readDecision(decision) : undefined
      if (read instanceof Error) {
        return this.failedClosed(exec, trace, 'pre-execute', plugin, `a tools/pre-execute listener of plugin "${plugin}"`, read)
      }
      const { kind, reason } = read ?? {}
      if (kind === 'allow') {
        trace.push({ stage: 'pre-execute', decision: 'allow', by: plugin })
      } else if ((kind === 'deny' || kind === 'ask') && typeof reason === 'string') {
        if (kind === 'deny') return this.denied(trace, 'pre-execute', plugin, reason)
        trace.push({ stage: 'pre-execute', decision: 'ask', by: plugin, reason })
        ask ??= { reason, plugin }
      } else {
        const shape = shapeOf(decision)
        return this.failedClosed(
          exec,
          trace,
          'pre-execute',
          plugin,
          `a tools/pre-execute listener of plugin "${plugin}"`,
          `it returned ${shape}, not a decision`,
        )
      }
    }
    return ask
  }

  /** 4. approval: on ask, the approval service answers; no service, a throw, no answer in time or anything but allowed denies */
  private async approval(exec: Execution, ask: Ask, trace: StageRecord[]): Promise<ToolFailure | undefined> {
    if (isAborted(exec.signal)) return this.abortedBeforeDispatch(exec.name)
    const approval = this.host.service('approval')
    if (!approval) {
      return this.denied(
        trace,
        'approval',
        'core',
        `the call to "${exec.name}" needs approval (${ask.reason}) but no approval service is mounted, so it was denied; load @faber/plugin-approval to answer such requests`,
      )
    }
    let outcome: unknown
    // the deployment's deadline for any approval service: past it the request's signal aborts, so answerers stop asking
    const limit = this.host.deadlines().approvalMs
    const expired = new AbortController()
    try {
      const pending = approval.request({
        agent: exec.agent,
        tool: exec.name,
        arguments: exec.arguments,
        callId: exec.callId,
        reason: ask.reason,
        program: this.programOf(exec.parent),
        signal: AbortSignal.any([exec.signal, expired.signal]),
        exec,
      })
      outcome = await withDeadline(pending, limit)
    } catch (error) {
      this.host.log().warn('approval of "%s" failed: %s', exec.name, messageOf(error))
      outcome = 'unavailable'
    }
    if (outcome === TIMED_OUT) {
      expired.abort(new Error(`no answer came within ${formatDuration(limit)}`))
      outcome = 'timed-out'
    }
    if (outcome === 'allowed') {
      trace.push({ stage: 'approval', decision: 'allowed', by: 'approval' })
      return
    }
    if (isAborted(exec.signal)) {
      trace.push({ stage: 'approval', decision: 'cancelled', by: 'approval' })
      return this.abortedBeforeDispatch(exec.name)
    }
    const messages: Record<string, string> = {
      rejected: `the call to "${exec.name}" was rejected by the approver (${ask.reason}); do not retry it unchanged`,
      cancelled: `approval for "${exec.name}" was cancelled, so the call did not run`,
      'timed-out': `the call to "${exec.name}" needs approval (${ask.reason}) but no answer came in time, so it was denied; the approver may be away, so do not retry it at once`,
    }
    const decision = typeof outcome === 'string' && outcome in messages ? outcome : 'unavailable'
    const message = messages[decision] ?? `the call to "${exec.name}" needs approval (${ask.reason}) but no approver answered, so it was denied`
    return this.denied(trace, 'approval', 'approval', message, decision)
  }

  /** the program of the nearest enclosing run_code, for approvers */
  private programOf(parent: ExecutionToken | undefined): string | undefined {
    for (let exec = parent && this.liveOf(parent); exec; exec = exec.parent && this.liveOf(exec.parent)) {
      if (exec.name === RUN_CODE) return (exec.arguments as { code?: string }).code ?? ''
    }
  }

  /** 5. guards: global ones, then the agent chain's from the root down; the first reason wins */
  private runGuards(exec: Execution, trace: StageRecord[]): ToolFailure | undefined {
    const lineage = exec.agent?.lineage ?? NO_LINEAGE
    for (let depth = -1; depth < lineage.length; depth++) {
      const guards = this.host.guards(depth < 0 ? undefined : lineage[depth])
      if (!guards?.length) continue
      for (const { value: guard, plugin } of guards) {
        let reason: unknown
        try {
          reason = guard(exec)
        } catch (error) {
          return this.failedClosed(exec, trace, 'guard', plugin, `a guard of plugin "${plugin}"`, error)
        }
        // only undefined lets the call through: an empty reason is still a denial, and anything else fails closed
        if (reason === undefined) continue
        if (typeof reason !== 'string') {
          let thenable = false
          try {
            thenable = isThenable(reason)
            // the call is denied already; an async guard's later rejection must not become an unhandled one (which ends the process)
            if (thenable) (reason as PromiseLike<unknown>).then(undefined, (error) => this.lateGuardFailure(exec, plugin, error))
          } catch {}
          const what = thenable ? 'a promise (guards must be synchronous)' : `${reason === null ? 'null' : typeof reason}, not a reason string`
          return this.failedClosed(exec, trace, 'guard', plugin, `a guard of plugin "${plugin}"`, `it returned ${what}`)
        }
        return this.denied(trace, 'guard', plugin, reason || `the call to "${exec.name}" was denied by a guard of plugin "${plugin}" (it gave no reason)`)
      }
    }
  }

  private lateGuardFailure(exec: Execution, plugin: string, error: unknown) {
    this.host
      .log()
      .warn('a guard of plugin "%s" rejected on "%s" after its call was denied (guards must be synchronous): %s', plugin, exec.name, messageOf(error))
  }

  /** 6. tools/execute wrappers around 7. the body; wrappers always see a normalized result */
  private dispatch(exec: Execution, wrappers: readonly Listener[], trace: StageRecord[]): Promise<ToolResult> {
    // what next() answered: already the pipeline's own result, passed on as it is
    const trusted = new WeakSet<ToolResult>()
    const step = async (index: number, signal: AbortSignal, records: StageRecord[]): Promise<ToolResult> => {
      if (index === wrappers.length) return this.dispatchToolBody(exec, signal)
      const hook = wrappers[index]
      const plugin = ownerOf(hook).plugin
      // a next() kept past its wrapper's answer would run the body after the call was decided and reported
      let answered = false
      const next: DispatchNext = (replacement) => {
        if (answered) {
          const message = `a tools/execute wrapper of plugin "${plugin}" called next() after it returned; nothing ran`
          this.host.log().warn('%s (on "%s")', message, exec.name)
          return Promise.resolve(errorResult('ABORTED_BEFORE_DISPATCH', message))
        }
        if (replacement !== undefined && !(replacement instanceof AbortSignal)) {
          const what = `a tools/execute wrapper of plugin "${plugin}"`
          return Promise.resolve(this.failedClosed(exec, records, 'execute', plugin, what, 'it passed next() something other than an AbortSignal'))
        }
        // the rest of the chain decided this call only if it answered before this wrapper did (a wrapper racing next()
        // against a deadline answers first, and the call may finish while the rest still runs): only then its records count
        const inner: StageRecord[] = []
        return step(index + 1, replacement ?? signal, inner).then((result) => {
          if (!answered) records.push(...inner)
          trusted.add(result)
          return result
        })
      }
      let result: unknown
      try {
        result = await hook.callback(exec, next, signal)
      } catch (error) {
        return this.failedClosed(exec, records, 'execute', plugin, `a tools/execute wrapper of plugin "${plugin}"`, error)
      } finally {
        answered = true
      }
      return trusted.has(result as ToolResult) ? (result as ToolResult) : this.normalizeDispatchResult(exec, result, records, plugin)
    }
    return step(0, exec.signal, trace)
  }

  /** a result a wrapper made itself: checked, and a success's value revalidated through the collapse */
  private normalizeDispatchResult(exec: Execution, answer: unknown, trace: StageRecord[], plugin: string): ToolResult {
    const what = `a tools/execute wrapper of plugin "${plugin}"`
    const result = copyResult(answer)
    if (!result) return this.failedClosed(exec, trace, 'execute', plugin, what, 'it returned something that is not a tool result')
    if (result.isError) {
      // a denial of its own names the wrapper; it cannot speak for another stage or plugin, nor deny a body that ran
      if (result.error.code === 'DENIED' && liveExecutions.ran(exec)) {
        return this.withheld(exec, trace, 'execute', plugin, 'deny', `${what} answered DENIED (${result.error.message})`)
      }
      const error = result.error.code === 'DENIED' ? { ...result.error, deniedBy: { stage: 'execute' as const, plugin } } : result.error
      return { ...result, error: Object.freeze(error) }
    }
    const tool = this.decidedTool(exec, 'while the call ran')
    if (tool.isError) return tool
    const checked = this.checkValue(exec, tool, result.value)
    if (checked.isError) return checked
    return { isError: false, value: checked.value, content: result.content, meta: result.meta }
  }

  /**
   * the definition this call was decided for, resolved again through the collapse: policy may have waited (an async
   * listener, approval) while the tool left or was registered anew, and a body never runs on arguments that were
   * validated and decided for another definition
   */
  private decidedTool(exec: Execution, when: string): (CompiledTool & { isError?: false }) | ToolFailure {
    const tool = this.resolveExecution(this.viewOf(exec.agent), exec.name, exec.parent !== undefined)
    if (typeof tool === 'string') return errorResult('UNKNOWN_TOOL', `tool "${exec.name}" is no longer available; it was removed ${when}`)
    if (tool.info !== exec.tool) return errorResult('UNKNOWN_TOOL', `tool "${exec.name}" changed while this call waited; call it again`)
    return tool
  }

  /**
   * 7. the body, resolved again through the collapse: the very definition the call was decided for, or nothing. a body
   * that answers synchronously is answered without a promise (on every nested call); a pending one through `settled`
   */
  private dispatchToolBody(exec: Execution, signal: AbortSignal): ToolResult | Promise<ToolResult> {
    const tool = this.decidedTool(exec, 'before it could run')
    if (tool.isError) return tool
    if (isAborted(signal)) return this.abortedBeforeDispatch(exec.name)
    let value: unknown
    let pending: boolean
    liveExecutions.bodyStarted(exec)
    try {
      value = tool.definition.execute(exec.arguments, { signal, exec })
    } catch (error) {
      return this.bodyFailed(exec, error)
    }
    try {
      pending = isThenable(value)
    } catch (error) {
      // a returned proxy whose traps throw: there is no value to read
      return errorResult('INVALID_OUTPUT', `"${exec.name}" returned a value that could not be read: ${messageOf(error)}`)
    }
    if (pending) return this.settledBody(exec, tool, signal, value)
    return this.bodyResult(exec, tool, signal, value)
  }

  private async settledBody(exec: Execution, tool: CompiledTool, signal: AbortSignal, pending: unknown): Promise<ToolResult> {
    let value: unknown
    try {
      value = await pending
    } catch (error) {
      return this.bodyFailed(exec, error)
    }
    return this.bodyResult(exec, tool, signal, value)
  }

  private bodyResult(exec: Execution, tool: CompiledTool, signal: AbortSignal, value: unknown): ToolResult {
    const checked = this.checkValue(exec, tool, value)
    if (checked.isError) return checked
    if (isAborted(signal)) return errorResult('ABORTED', `the call to "${exec.name}" was cancelled while it ran; its result was discarded`)
    return this.rendered(exec, tool, checked.value)
  }

  /** what a body threw, as a result; whatever it threw, this does not throw */
  private bodyFailed(exec: Execution, error: unknown): ToolFailure {
    let toolCode: string | undefined
    try {
      if (error instanceof ToolResultError) return this.carried(exec, error)
      const code = (error as { code?: unknown } | null)?.code
      if (typeof code === 'string') toolCode = code
    } catch {}
    const prefix = toolCode ? `${toolCode}: ` : ''
    return errorResult('TOOL_FAILED', `"${exec.name}" failed: ${prefix}${messageOf(error)}`, toolCode ? { toolCode } : {})
  }

  /**
   * the error result a body's ToolResultError carries, copied once: its result is the body's data, so a success (which
   * would skip the output schema and the snapshot), a malformed failure, null or a throwing proxy is the body failing
   */
  private carried(exec: Execution, error: ToolResultError): ToolFailure {
    let result: ToolResult | undefined
    try {
      result = copyResult(error.result)
    } catch {}
    if (!result?.isError) return errorResult('TOOL_FAILED', `"${exec.name}" failed: it threw a ToolResultError that carries no error result`)
    // a body is no policy stage: a denial it claims is its own failure
    if (result.error.code === 'DENIED') return errorResult('TOOL_FAILED', `"${exec.name}" failed: ${result.error.message}`)
    return { ...result, error: Object.freeze(result.error) }
  }

  private checkValue(exec: Execution, tool: CompiledTool, value: unknown): { isError: false; value: Json } | ToolFailure {
    let json: Json
    try {
      json = snapshot(value, '$')
    } catch (error) {
      if (!(error instanceof JsonError)) throw error
      return errorResult('INVALID_OUTPUT', `"${exec.name}" returned a value that is not JSON: ${error.message}`)
    }
    const problem = tool.validateOutput(json, '$')
    if (problem !== undefined) return errorResult('INVALID_OUTPUT', `"${exec.name}" returned a value that does not match its output schema: ${problem}`)
    return { isError: false, value: json }
  }

  private rendered(exec: Execution, tool: CompiledTool, value: Json): ToolResult {
    try {
      // a nested call's value goes back to its program as JSON text: under the default rendering that text is the
      // content too, made once here and handed to the bridge by jsonOf
      if (exec.parent !== undefined && tool.rendersJson && typeof value === 'object' && value !== null) {
        const text = JSON.stringify(value)
        this.renderedValue = value
        this.renderedText = text
        return { isError: false, value, content: capContent(text, tool.resultChars) }
      }
      return { isError: false, value, content: tool.render(exec.arguments, value) }
    } catch (error) {
      return errorResult('INVALID_OUTPUT', `"${exec.name}" could not render its result: ${messageOf(error)}`)
    }
  }

  /** a listener's pending answer raced against its stage's deadline: the answer, or TIMED_OUT */
  private within(stage: 'preExecuteMs' | 'postExecuteMs', decision: PromiseLike<unknown>) {
    const limit = this.host.deadlines()[stage]
    let queue = this.deadlines[stage]
    if (queue?.ms !== limit) queue = this.deadlines[stage] = new DeadlineQueue(limit)
    return { limit, answer: queue.race(decision) }
  }

  /** 8. tools/post-execute: each listener sees the result as amended so far; block ends the chain */
  private async postExecute(exec: Execution, hooks: readonly Listener[], result: ToolResult, trace: StageRecord[]): Promise<ToolResult> {
    // each listener sees the result as amended so far: the dispatch reads its arguments as it calls each listener
    const args: [Execution, ToolResult] = [exec, Object.freeze(result)]
    for (const answer of dispatch(hooks, args)) {
      const { plugin } = answer
      const what = `a tools/post-execute listener of plugin "${plugin}"`
      if (answer.failed) return this.failedClosed(exec, trace, 'post-execute', plugin, what, answer.error)
      let decision = answer.value
      try {
        if (isThenable(decision)) {
          const { limit, answer } = this.within('postExecuteMs', decision)
          decision = await answer
          if (decision === TIMED_OUT) {
            const why = `${what} did not answer within ${formatDuration(limit)}`
            this.host.log().warn('the result of "%s" was withheld because %s', exec.name, why)
            return this.withheld(exec, trace, 'post-execute', plugin, 'timed-out', why)
          }
        }
      } catch (error) {
        return this.failedClosed(exec, trace, 'post-execute', plugin, what, error)
      }
      if (decision === undefined || decision === null) continue
      const read = typeof decision === 'object' ? readDecision(decision) : undefined
      if (read instanceof Error) return this.failedClosed(exec, trace, 'post-execute', plugin, what, read)
      const { kind, content, value, feedback, hasValue = false } = read ?? {}
      if (kind === 'block' && typeof feedback === 'string') return this.withheld(exec, trace, 'post-execute', plugin, 'block', feedback)
      const hasContent = content !== undefined
      if (kind !== 'accept' || (hasContent && hasValue) || (hasContent && typeof content !== 'string') || (hasValue && result.isError)) {
        const shape = shapeOf(decision)
        return this.failedClosed(
          exec,
          trace,
          'post-execute',
          plugin,
          what,
          `it returned ${shape}, not a valid decision (accept may replace content or value, not both)`,
        )
      }
      if (hasValue) {
        const tool = this.decidedTool(exec, 'while the call ran')
        if (tool.isError) return liveExecutions.ran(exec) ? this.withheld(exec, trace, 'post-execute', plugin, 'failed-closed', tool.error.message) : tool
        const checked = this.checkValue(exec, tool, value)
        if (checked.isError) return this.failedClosed(exec, trace, 'post-execute', plugin, what, checked.error.message)
        result = this.rendered(exec, tool, checked.value)
        trace.push({ stage: 'post-execute', decision: 'replace-value', by: plugin })
      } else if (hasContent) {
        result = { ...result, content: content as string }
        trace.push({ stage: 'post-execute', decision: 'replace-content', by: plugin })
      }
      args[1] = Object.freeze(result)
    }
    return result
  }

  /** 9. finish: freeze the one result and notify tools/result observers (isolated from each other) */
  private finish(exec: Execution, result: ToolResult, trace: StageRecord[]): ToolResult {
    const stages = trace.length ? Object.freeze(trace) : EMPTY_TRACE
    const final: ToolResult = Object.freeze(
      result.isError
        ? { isError: true, error: Object.freeze(result.error), content: result.content, meta: result.meta, trace: stages }
        : { isError: false, value: result.value, content: result.content, meta: result.meta, trace: stages },
    )
    const observers = this.stages.result.for(exec.agent)
    if (observers.length) emitEach(observers, [exec, final], (plugin, error) => this.observerFailed(plugin, exec, error))
    return final
  }

  private observerFailed(plugin: string, exec: Execution, error: unknown) {
    this.host.log().warn('a tools/result observer of plugin "%s" threw on "%s" (ignored): %s', plugin, exec.name, messageOf(error))
  }

  /**
   * the JSON text of a nested call's result value (a frozen snapshot): the text its default rendering just made, taken
   * once (the slot holds only the latest, so nothing large stays held), else made now
   */
  jsonOf(value: Json): string {
    if (value !== this.renderedValue) return jsonText(value)
    const text = this.renderedText
    this.renderedValue = undefined
    this.renderedText = ''
    return text
  }

  /** notifies observers of a core event, each isolated from the others */
  notify<K extends 'code/call-start' | 'code/call-settle'>(event: K, agent: Agent | undefined, payload: Parameters<Events[K]>[0]) {
    const failed = (plugin: string, error: unknown) => this.host.log().warn('a %s observer of plugin "%s" threw (ignored): %s', event, plugin, messageOf(error))
    emitEach(this.notices[event].for(agent), [payload], failed)
  }
}
