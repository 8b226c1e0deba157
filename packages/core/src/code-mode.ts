// Code Mode's transport: the run_code tool, the bridge that re-enters the pipeline for each binding call,
// the scheduler for nested calls, and the prompt text that states the collapse.

import { setMaxListeners } from 'node:events'
import type { Agent } from './agent.ts'
import { type Catalog, SEARCH_LIMIT } from './catalog.ts'
import { CallJournal, type CodeJournalEvent, checkpointOf } from './code-replay.ts'
import type { BridgeReply, CallSite, CodeRunLimits, CodeRunOutcome, CodeRuntime } from './code-runtime.ts'
import type { CallRequest, PreparedCall } from './execution.ts'
import { type Json, JsonError, snapshot } from './json.ts'
import { messageOf } from './message.ts'
import { parseJson } from './parse-json.ts'
import { listenForWaits, RunWaits, type WaitTally } from './person-wait.ts'
import { errorResult, type ToolErrorInfo, type ToolFailure, type ToolResult, ToolResultError } from './result.ts'
import { type ExecutionMode, Scheduler } from './scheduler.ts'
import { t } from './schema.ts'
import { argNames, renderIndex, type SdkTool, sdkUsage, withoutHelpers } from './sdk.ts'
import { stripTypes } from './strip.ts'
import { type CompiledTool, compileTool, defineTool, type Execution, RUN_CODE, type ToolDefinition, type ToolRun } from './tool.ts'

export type CodeFailure = NonNullable<ToolErrorInfo['kind']>

export interface NestedCallStart {
  outerCallId: string
  callId: string
  name: string
  arguments: Json
  agent?: Agent
  /** where in the program the call was made, when the code runtime said */
  site?: CallSite
  startedAt: number
}

export interface NestedCallSettle extends NestedCallStart {
  result: ToolResult
  durationMs: number
}

declare module 'cordis' {
  interface Events {
    'code/call-start'(event: NestedCallStart): void
    'code/call-settle'(event: NestedCallSettle): void
  }
}

export interface CodeMode {
  definition: ToolDefinition
  /** the rule; `indexed` when the SDK section is an index, so the rule shows how to discover and describe tools */
  codeOnlyRule(collapsed: readonly CompiledTool[], indexed: boolean): string
  routeMessage(name: string, declared: boolean): string
  /** the SDK section; `ruled` when the code-only rule precedes it (and says how to discover tools if need be) */
  sdkSection(agent: Agent | undefined, ruled: boolean): { text: string; indexed: boolean }
}

/** what run_code needs of the registry */
export interface CodeModeHost {
  readonly config: {
    typecheck: boolean
    maxParallelSubCalls: number
    sdkBudget: number
    codeLimits: Partial<CodeRunLimits>
    checkpointAfterMs: number
    maxCheckpointBytes: number
  }
  codeRuntime(): CodeRuntime | undefined
  /** the deployment's count of programs waiting on a person, against its bound */
  readonly waits: WaitTally
  /**
   * create's signal-free half of a nested call: one snapshot and validation per call; `parsed`: see Pipeline.prepare.
   * `settle` runs it like `run`, with the result itself when nothing on the way was pending
   */
  prepare(input: CallRequest, parsed?: boolean): PreparedCall & { settle(signal: AbortSignal): ToolResult | Promise<ToolResult> }
  /** the JSON text of a nested call's result value, made once with its rendering where it could be */
  jsonOf(value: Json): string
  /** whether a code/call-start or code/call-settle listener hears this agent's nested calls: when none does, no payload is built */
  observesNested(agent: Agent | undefined): boolean
  notify<K extends 'code/call-start' | 'code/call-settle'>(
    event: K,
    agent: Agent | undefined,
    payload: K extends 'code/call-start' ? NestedCallStart : NestedCallSettle,
  ): void
  /** tells code/journal listeners of a checkpointed program's journal; false when none listens */
  journal(event: CodeJournalEvent): boolean
  /** the first answer of code/resume listeners: the journal recorded for this run_code call before a restart */
  recorded(exec: Execution): unknown
  /** the binding names a program of this agent gets: every tool it can see but run_code, and the helpers */
  programTools(agent: Agent | undefined): string[]
  sdkTools(agent: Agent | undefined): SdkTool[]
  sdkDeclarations(agent: Agent | undefined): string
  sdkPresentation(agent: Agent | undefined): 'full' | 'index' | 'auto'
  catalog(agent: Agent | undefined): Catalog
}

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/

/** a call site a code runtime reported, as a frozen copy of its own; undefined unless both are whole numbers from 1 */
function siteOf(site: CallSite | undefined): CallSite | undefined {
  if (typeof site !== 'object' || site === null) return undefined
  const { line, column } = site
  if (!Number.isSafeInteger(line) || !Number.isSafeInteger(column) || line < 1 || column < 1) return undefined
  return Object.freeze({ line, column })
}

// how a program finds and reads the tools an index leaves out, with the shapes of both answers
const DISCOVERY =
  "`await tools.$search('what you need', limit?)` returns `{ name, summary }[]`, best first; `await tools.$describe('name', ...)` returns those tools' full declarations as a string."

function binding(name: string) {
  return IDENTIFIER.test(name) ? `tools.${name}` : `tools[${JSON.stringify(name)}]`
}

function failedOnHost(name: string, error: unknown): BridgeReply {
  return { ok: false, message: `${binding(name)} failed on the host: ${messageOf(error)}` }
}

const CALL_TEXT = 80
// what the helpers take: the host answers them on its own thread, so what a program sends must not set their cost
const MAX_QUERY = 1000
const MAX_DESCRIBE = 100

/** `tools.slow({"ms":1000})`, its argument cut to a glance */
function callText(name: string, argumentsJson: string) {
  const args = argumentsJson.length > CALL_TEXT ? `${argumentsJson.slice(0, CALL_TEXT - 1)}…` : argumentsJson
  return `${binding(name)}(${args})`
}

interface OutstandingCall {
  readonly id: number
  readonly name: string
  readonly argumentsJson: string
  previous: OutstandingCall | undefined
  next: OutstandingCall | undefined
}

// the calls a program is waiting on, in the order it made them: a call joins and leaves in place, with no map
class Outstanding {
  size = 0
  private first: OutstandingCall | undefined
  private last: OutstandingCall | undefined

  add(id: number, name: string, argumentsJson: string): OutstandingCall {
    const call: OutstandingCall = { id, name, argumentsJson, previous: this.last, next: undefined }
    if (this.last) this.last.next = call
    else this.first = call
    this.last = call
    this.size++
    return call
  }

  delete(call: OutstandingCall) {
    if (call.previous) call.previous.next = call.next
    else this.first = call.next
    if (call.next) call.next.previous = call.previous
    else this.last = call.previous
    call.previous = call.next = undefined
    this.size--
  }

  /** each one as `tools.slow({"ms":1000})`, in the order the program made them */
  texts(): string[] {
    const texts: string[] = []
    for (let call = this.first; call; call = call.next) texts.push(callText(call.name, call.argumentsJson))
    return texts
  }
}

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`

/** calls named to the model: the first few, then how many more (a program may leave a thousand running) */
const LISTED_CALLS = 10
function callList(texts: readonly string[]) {
  const listed = texts.slice(0, LISTED_CALLS).join(', ')
  return texts.length > LISTED_CALLS ? `${listed} and ${texts.length - LISTED_CALLS} more` : listed
}

function cancelledNote(cancelled: readonly string[]) {
  const n = cancelled.length
  return `(${n} call${n === 1 ? ' was' : 's were'} cancelled because the program returned first: ${callList(cancelled)}; await every call before returning)`
}

// compact: a result is read by a model, and JSON padding only costs it tokens
function renderOutput(value: { logs: readonly string[]; result?: Json; cancelled?: readonly string[] }, hasResult: boolean) {
  const parts = [...value.logs]
  if (hasResult) parts.push(typeof value.result === 'string' ? value.result : JSON.stringify(value.result))
  else if (parts.length) parts.push('(the program returned undefined)')
  else parts.push('(the program returned undefined and printed nothing: `return` the value you need, and check that the fields it reads exist)')
  if (value.cancelled?.length) parts.push(cancelledNote(value.cancelled))
  return parts.join('\n')
}

// what v8 says for `tools.reed(...)` when the program has no such binding, as the sandbox reports it uncaught
const NOT_A_FUNCTION = /^TypeError: tools\.([A-Za-z_$][\w$]*) is not a function( \(line \d+, column \d+\))?$/

/** an uncaught call of a name that is not a tool, said so with the nearest tools (or how to find one) */
function notATool(message: string, catalog: Catalog): string {
  const missing = message.length < 1000 ? NOT_A_FUNCTION.exec(message) : null
  if (!missing) return message
  const near = catalog.nearest(missing[1]).map((name) => `\`${binding(name)}\``)
  const next = near.length ? `did you mean ${near.join(' or ')}?` : "find tools by what they do with `await tools.$search('...')`"
  return `TypeError: \`tools.${missing[1]}\` is not a tool; ${next}${missing[2] ?? ''}`
}

function failure(kind: CodeFailure, message: string, extra: Omit<ToolErrorInfo, 'code' | 'message' | 'kind'> = {}): ToolFailure {
  const result = errorResult('CODE_RUN_FAILED', `run_code failed (${kind}): ${message}`, { ...extra, kind })
  const logs = extra.logs?.length ? `\n--- logs ---\n${extra.logs.join('\n')}` : ''
  return { ...result, content: `${result.content}${logs}` }
}

// run_code's schemas, one pair per process: compileTool keeps what it compiled from a transport's schema objects, so a
// context set up again (a test, a second deployment) does not check and compile them again
const runCodeParameters = t.object({
  code: t.string({ minLength: 1 }).describe('the body of an async function'),
  description: t.string({ minLength: 1 }).describe('one line on what it does, for approval and audit'),
})
const runCodeOutput = t.object({ logs: t.array(t.string()), result: t.unknown().optional(), cancelled: t.array(t.string()).optional() })
// checked and compiled here, as the module loads, not in the first context set up in the process (1-3 ms cold there)
compileTool(
  defineTool({ name: RUN_CODE, description: RUN_CODE, parameters: runCodeParameters, output: { schema: runCodeOutput }, execute: () => ({ logs: [] }) }),
  { plugin: 'core', transport: true },
)

export function createRunCode(runtime: CodeModeHost): CodeMode {
  // the journal a code/resume listener kept for this call before a restart, checked: it is read back from a file
  const resumed = (exec: Execution) => {
    const unreadable = (error: unknown) =>
      new ToolResultError(
        failure(
          'crash',
          `the journal recorded for this program before a restart could not be read (${messageOf(error)}); nothing of it ran again: check what its calls did before running it again`,
        ),
      )
    let answer: unknown
    try {
      answer = runtime.recorded(exec)
    } catch (error) {
      throw unreadable(error)
    }
    if (answer === undefined) return undefined
    try {
      return checkpointOf(answer)
    } catch (error) {
      throw unreadable(error)
    }
  }

  async function run(args: { code: string; description: string }, run: ToolRun) {
    const { exec } = run
    const agent = exec.agent
    const host = runtime.codeRuntime()
    if (!host) {
      throw new ToolResultError(
        failure(
          'unavailable',
          'no code runtime is mounted, so programs cannot run here; the deployment should load @faber/sandbox (or @faber/sandbox-isolate)',
        ),
      )
    }
    const stripped = stripTypes(args.code)
    if (!stripped.ok) throw new ToolResultError(failure('syntax', stripped.message, { line: stripped.line, column: stripped.column }))
    if (runtime.config.typecheck) {
      const { typecheckProgram } = await import('./typecheck.ts')
      const diagnostics = typecheckProgram(args.code, runtime.sdkDeclarations(agent))
      if (diagnostics.length) throw new ToolResultError(failure('typecheck', `the program does not type-check against the SDK:\n${diagnostics.join('\n')}`))
    }

    const names = runtime.programTools(agent)
    const nested = new AbortController()
    // read once: node's signal getter checks its receiver on every read
    const nestedSignal = nested.signal
    // every nested call's body may listen on this one signal: past 10 at once node would print a MaxListenersExceededWarning
    // on the host's stderr, a line a program could cause at will. what listens is bounded by the calls a run may have waiting
    setMaxListeners(0, nestedSignal)
    const stop = () => nested.abort(run.signal.reason)
    run.signal.addEventListener('abort', stop, { once: true })
    const scheduler = new Scheduler(runtime.config.maxParallelSubCalls)
    // the calls outstanding, so the model can be told which ones the program left behind
    const inflight = new Outstanding()
    let drained: (() => void) | undefined
    let settled = false
    let sequence = 0
    // the calls the program made, to answer them again when it runs again after a checkpoint (code-replay.ts), in this
    // process or, from the journal a code/resume listener kept, in a new one
    const { checkpointAfterMs } = runtime.config
    const recorded = resumed(exec)
    const journal = checkpointAfterMs > 0 || recorded ? new CallJournal(runtime.config.maxCheckpointBytes, callText, exec.callId) : undefined
    const durable = (change: CodeJournalEvent['change']) => runtime.journal({ outerCallId: exec.callId, agent, change })
    if (recorded) journal?.seed(recorded, durable)

    // the bridge answers every call and never rejects: whatever a nested call does, the program gets a reply
    // (a failure becomes its ToolCallError) and no promise is left for the host to find unhandled. a reply that needed
    // no waiting comes back as it is (callNow); `call` wraps it for backends that take only promises
    const callNow = (name: string, argumentsJson: string, site?: CallSite): BridgeReply | Promise<BridgeReply> => {
      if (typeof name !== 'string' || typeof argumentsJson !== 'string') {
        return { ok: false, message: 'the call reached the host without a tool name and JSON text; it was refused', code: 'INVALID_ARGUMENTS' }
      }
      if (settled) return { ok: false, message: `${binding(name)} was called after the program finished; the call was refused` }
      if (name[0] === '$') {
        try {
          return helper(name, argumentsJson)
        } catch (error) {
          return failedOnHost(name, error)
        }
      }
      const at = siteOf(site)
      if (!journal) return nestedCall(++sequence, name, argumentsJson, at)
      const reply = journal.call(name, argumentsJson, (id) => nestedCall(id, name, argumentsJson, at))
      // another path than the first run's: the run ends, on a turn of its own (not inside the backend's report of the call)
      if (journal.diverged) queueMicrotask(() => attempt.abort(new Error('the program took another path')))
      return reply
    }
    // Promise.resolve hands a pending reply (a native promise) back as it is
    const call = (name: string, argumentsJson: string, site?: CallSite): Promise<BridgeReply> => Promise.resolve(callNow(name, argumentsJson, site))

    // tools.$search and tools.$describe: answered from the agent's view, with no call through the pipeline
    const helper = (name: string, argumentsJson: string): BridgeReply => {
      let args: unknown
      try {
        args = JSON.parse(argumentsJson)
      } catch {}
      if (!Array.isArray(args)) return { ok: false, message: `tools.${name}: the arguments did not arrive as a JSON list`, code: 'INVALID_ARGUMENTS' }
      const catalog = runtime.catalog(agent)
      if (name === '$search') {
        const [query, limit = SEARCH_LIMIT] = args
        if (typeof query !== 'string' || typeof limit !== 'number') {
          return {
            ok: false,
            message: "tools.$search(query, limit?): pass the query as a string, e.g. tools.$search('read a file')",
            code: 'INVALID_ARGUMENTS',
          }
        }
        if (query.length > MAX_QUERY) {
          return {
            ok: false,
            message: `tools.$search: the query has ${query.length} characters; pass a query of at most ${MAX_QUERY} characters, a few words on what you need`,
            code: 'INVALID_ARGUMENTS',
          }
        }
        return { ok: true, value: JSON.stringify(catalog.search(query, limit)) }
      }
      if (name === '$describe') {
        const names = args.flat()
        if (names.length === 0 || names.some((n) => typeof n !== 'string')) {
          return {
            ok: false,
            message: "tools.$describe(...names): pass tool names as strings, e.g. tools.$describe('read', 'write')",
            code: 'INVALID_ARGUMENTS',
          }
        }
        if (names.length > MAX_DESCRIBE) {
          return {
            ok: false,
            message: `tools.$describe: ${names.length} names; describe at most ${MAX_DESCRIBE} tools at a time`,
            code: 'INVALID_ARGUMENTS',
          }
        }
        const described = catalog.describe(names as string[])
        return described.ok ? { ok: true, value: JSON.stringify(described.text) } : { ok: false, message: described.message, code: 'UNKNOWN_TOOL' }
      }
      return { ok: false, message: `tools.${name} is not a helper; the helpers are tools.$search and tools.$describe`, code: 'UNKNOWN_TOOL' }
    }

    // a nested sub-dispatch: the whole pipeline again, with the program's token as parent (so it never collapses).
    // it is on every call a program makes, so it allocates what the reply needs and what observers are sent, no more:
    // a call that nothing on its way held up (no pending listener, scheduler slot or body) is answered without a promise,
    // and is never outstanding: only a pending one is counted among the calls the program waits on
    const nestedCall = (id: number, name: string, argumentsJson: string, site: CallSite | undefined): BridgeReply | Promise<BridgeReply> => {
      let reply: BridgeReply | Promise<BridgeReply>
      try {
        reply = startNested(id, name, argumentsJson, site)
      } catch (error) {
        return failedOnHost(name, error)
      }
      if (!(reply instanceof Promise)) return reply
      const call = inflight.add(id, name, argumentsJson)
      return reply.then(
        (reply) => {
          leave(call)
          return reply
        },
        (error) => {
          leave(call)
          return failedOnHost(name, error)
        },
      )
    }

    const leave = (call: OutstandingCall) => {
      inflight.delete(call)
      if (inflight.size === 0) drained?.()
    }

    // create's half (one snapshot of the argument), then a place in the scheduler: at once, or once one is free
    const startNested = (id: number, name: string, argumentsJson: string, site: CallSite | undefined): BridgeReply | Promise<BridgeReply> => {
      let parsed: unknown
      try {
        parsed = parseJson(argumentsJson)
      } catch {
        return { ok: false, message: `${binding(name)}: the argument did not arrive as JSON`, code: 'INVALID_ARGUMENTS' }
      }
      const callId = `${exec.callId}/${id}`
      const prepared = runtime.prepare({ callId, name, arguments: parsed, agent, parent: exec.token, site }, true)
      const mode = prepared.mode
      if (scheduler.tryAcquire(mode)) return dispatchNested(name, callId, parsed, prepared, mode, site)
      return scheduler
        .acquire(mode)
        .then((acquired) =>
          acquired
            ? dispatchNested(name, callId, parsed, prepared, mode, site)
            : { ok: false, message: `${binding(name)} was refused: the program finished before the call could start` },
        )
    }

    // the rest of the pipeline under the run's nested signal, holding the scheduler's place until the result is in
    const dispatchNested = (
      name: string,
      callId: string,
      parsed: unknown,
      prepared: ReturnType<CodeModeHost['prepare']>,
      mode: ExecutionMode,
      site: CallSite | undefined,
    ): BridgeReply | Promise<BridgeReply> => {
      const observed = runtime.observesNested(agent)
      const started = observed ? { outerCallId: exec.callId, callId, name, arguments: parsed as Json, agent, site, startedAt: Date.now() } : undefined
      if (started) runtime.notify('code/call-start', agent, started)
      const begin = started ? performance.now() : 0
      let settled: ToolResult | Promise<ToolResult>
      try {
        settled = prepared.settle(nestedSignal)
      } catch (error) {
        scheduler.release(mode)
        throw error
      }
      if (!(settled instanceof Promise)) {
        scheduler.release(mode)
        return replyOf(settled, started, begin)
      }
      return settled.then(
        (result) => {
          scheduler.release(mode)
          return replyOf(result, started, begin)
        },
        (error) => {
          scheduler.release(mode)
          throw error
        },
      )
    }

    const replyOf = (result: ToolResult, started: NestedCallStart | undefined, begin: number): BridgeReply => {
      if (started) runtime.notify('code/call-settle', agent, { ...started, result, durationMs: performance.now() - begin })
      if (result.isError) return { ok: false, message: result.error.message, code: result.error.code }
      return { ok: true, value: runtime.jsonOf(result.value) }
    }

    // a nested call waiting on a person stops the program's wall clock (person-wait.ts); one that waits longer than
    // checkpointAfterMs ends the program's run, which gives its sandbox unit back, and the program runs again, from the
    // journal, once the person answered
    const waits = new RunWaits(runtime.waits)
    const unlisten = listenForWaits(exec.token, waits)
    let attempt = new AbortController()
    let checkpointed = false
    let checkpointTimer: ReturnType<typeof setTimeout> | undefined
    const checkpoint = () => {
      if (!journal?.recording || !waits.waiting || checkpointed || attempt.signal.aborted) return
      checkpointed = true
      waits.checkpoint()
      journal.durable(durable)
      attempt.abort(new Error('checkpointed while it waits on a person'))
    }
    const unwatch =
      journal && checkpointAfterMs > 0
        ? waits.watch((waiting) => {
            clearTimeout(checkpointTimer)
            if (waiting) checkpointTimer = setTimeout(checkpoint, checkpointAfterMs).unref()
          })
        : undefined
    const abortAttempt = () => attempt.abort(run.signal.reason)
    run.signal.addEventListener('abort', abortAttempt)
    let outcome!: CodeRunOutcome
    let cancelled: string[] = []
    let diverged: string | undefined
    try {
      for (;;) {
        if (run.signal.aborted) attempt.abort(run.signal.reason)
        journal?.start()
        try {
          outcome = await host.run({
            code: stripped.code,
            tools: names,
            call,
            callNow,
            signal: attempt.signal,
            limits: runtime.config.codeLimits,
            waits,
            values: journal?.values(),
          })
        } catch (error) {
          outcome = { ok: false, kind: 'crash', message: messageOf(error), logs: [] }
        }
        if (!checkpointed || run.signal.aborted) break
        // checkpointed: its unit is given back; it runs again once no call of it waits on a person
        await waits.settled(run.signal)
        if (run.signal.aborted) {
          outcome = { ok: false, kind: 'abort', message: 'the run was aborted while it waited on a person', logs: [] }
          break
        }
        checkpointed = false
        attempt = new AbortController()
      }
      // a second run that made other calls, or ended short of the calls it had made
      if (journal && journal.runs > 1) diverged = outcome.ok || outcome.kind === 'exception' ? journal.shortfall() : journal.diverged
    } finally {
      clearTimeout(checkpointTimer)
      unwatch?.()
      run.signal.removeEventListener('abort', abortAttempt)
      unlisten()
      cancelled = inflight.texts()
      // settlement: refuse what comes later, abort what is outstanding, and drain it before returning
      settled = true
      scheduler.close()
      nested.abort(new Error('run_code settled'))
      run.signal.removeEventListener('abort', stop)
    }
    if (inflight.size) await new Promise<void>((resolve) => (drained = resolve))

    if (diverged) {
      const note =
        'no call ran twice, and none it had not made before ran; make its calls depend only on what tools return (not on the clock or random numbers) and run it again'
      throw new ToolResultError(failure('diverged', `${diverged}. it was stopped: ${note}`, { logs: outcome.logs }))
    }
    if (!outcome.ok) {
      const { kind, message, logs, line, column } = outcome
      const left = cancelled.length
        ? ` (${cancelled.length === 1 ? '1 call still running was' : `${cancelled.length} calls still running were`} cancelled: ${callList(cancelled)})`
        : ''
      // a wait on a person that found the deployment's bound reached did not stop the clock: say why it ran out
      const crowded =
        kind === 'timeout' && waits.refused > 0
          ? ` (its wall clock ran on while it waited on a person: ${plural(runtime.waits.maxWaiting(), 'other program was', 'other programs were')} already waiting, the most maxWaitingPrograms allows; run it again later)`
          : ''
      const said = kind === 'exception' ? notATool(message, runtime.catalog(agent)) : message
      throw new ToolResultError(failure(kind, `${said}${left}${crowded}`, { logs, line, column }))
    }
    let result: Json | undefined
    if (outcome.result !== undefined) {
      try {
        result = JSON.parse(outcome.result)
      } catch {
        throw new ToolResultError(failure('crash', 'the sandbox returned a result that is not JSON text', { logs: outcome.logs }))
      }
      // JSON text can nest deeper than a result may (a snapshot's bounds): say so as the program's failure
      try {
        result = snapshot(result, '$')
      } catch (error) {
        if (!(error instanceof JsonError)) throw error
        throw new ToolResultError(failure('output-limit', `the value the program returned cannot be a result: ${error.message}`, { logs: outcome.logs }))
      }
    }
    const value: { logs: string[]; result?: Json; cancelled?: string[] } = { logs: outcome.logs }
    if (outcome.result !== undefined) value.result = result as Json
    if (cancelled.length) value.cancelled = cancelled
    return value
  }

  const definition = defineTool({
    name: RUN_CODE,
    // said so that it holds wherever the SDK is given: in a system prompt, or appended to this description over MCP
    description: 'Run a TypeScript program that calls tools as `await tools.<name>(args)`; only what it returns or logs comes back.',
    parameters: runCodeParameters,
    output: {
      schema: runCodeOutput,
      render: (_, value) => renderOutput(value, 'result' in value),
    },
    execute: run,
  })

  return {
    definition,
    routeMessage(name, declared) {
      if (!declared) {
        return `unknown tool "${name}": under code mode only ${RUN_CODE} can be called directly, and no tool named "${name}" is available to programs either`
      }
      return `unknown tool "${name}": under code mode only ${RUN_CODE} can be called directly; call ${binding(name)}(...) inside a ${RUN_CODE} program`
    },
    codeOnlyRule(collapsed, indexed) {
      const example = representative(collapsed)
      return [
        '## How to call tools here',
        `Call tools only inside a \`${RUN_CODE}\` program, e.g. \`await ${example}\`; calling any other tool directly fails with UNKNOWN_TOOL, wherever it is named.`,
        ...(indexed ? [DISCOVERY] : []),
      ].join('\n')
    },
    sdkSection(agent, ruled) {
      const tools = runtime.sdkTools(agent)
      const full = () => ['## The tools SDK', sdkUsage(), '', '```ts', withoutHelpers(runtime.sdkDeclarations(agent)).trimEnd(), '```'].join('\n')
      const index = (level: 'index' | 'names') =>
        [
          '## The tools SDK: an index',
          sdkUsage(),
          ...(ruled ? [] : [DISCOVERY]),
          // what a full SDK's declaration of ToolCallError says
          'A `ToolCallError` carries the `code` and `toolName` of the failed call.',
          level === 'index'
            ? 'Index below: `name(arguments) first sentence` (`?`: optional); `$describe` a tool before its first use.'
            : 'Index below: the tool names, grouped.',
          ...(tools.some((tool) => !IDENTIFIER.test(tool.name)) ? ['Call `a-b` as `tools["a-b"](args)`.'] : []),
          '',
          renderIndex(tools, level).trimEnd(),
        ].join('\n')
      const presentation = runtime.sdkPresentation(agent)
      if (presentation === 'full') return { text: full(), indexed: false }
      if (presentation === 'index') return { text: index('index'), indexed: true }
      // auto: the most that fits the budget
      const whole = full()
      if (estimateTokens(whole) <= runtime.config.sdkBudget) return { text: whole, indexed: false }
      const indexed = index('index')
      return { text: estimateTokens(indexed) <= runtime.config.sdkBudget ? indexed : index('names'), indexed: true }
    },
  }
}

/** a token estimate that needs no tokenizer: about four characters a token for code and English */
export function estimateTokens(text: string) {
  return Math.ceil(text.length / 4)
}

/**
 * the call the code-only rule shows: a tool a task would use (read-only, taking arguments, short-named) rather than
 * whichever sorts first, with placeholders for its required arguments
 */
function representative(tools: readonly CompiledTool[]): string {
  const rank = (tool: CompiledTool) => {
    const required = Array.isArray(tool.parameters.required) ? tool.parameters.required.length : 0
    return [tool.info.annotations.readOnly === true ? 0 : 1, required > 0 ? 0 : 1, tool.info.name.length]
  }
  const chosen = [...tools].sort((a, b) => {
    const [x, y] = [rank(a), rank(b)]
    return x[0] - y[0] || x[1] - y[1] || x[2] - y[2] || (a.info.name < b.info.name ? -1 : 1)
  })[0]
  if (!chosen) return `${binding('read')}({ ... })`
  const properties = (chosen.parameters.properties ?? {}) as Record<string, { type?: unknown }>
  const required = (Array.isArray(chosen.parameters.required) ? chosen.parameters.required : []).slice(0, 2) as string[]
  const args = required.map((name) => {
    const type = properties[name]?.type
    const placeholder = type === 'number' || type === 'integer' ? '1' : type === 'boolean' ? 'true' : type === 'string' ? "'...'" : '...'
    return `${IDENTIFIER.test(name) ? name : JSON.stringify(name)}: ${placeholder}`
  })
  return `${binding(chosen.info.name)}(${args.length ? `{ ${args.join(', ')} }` : argNames(chosen.parameters) ? '{ ... }' : ''})`
}
