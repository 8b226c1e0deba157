// Code Mode's transport: the run_code tool, the bridge that re-enters the pipeline for each binding call,
// the scheduler for nested calls, and the prompt text that states the collapse.

import type { Agent } from './agent.ts'
import type { BridgeReply, CodeRunOutcome } from './code-runtime.ts'
import type { Json } from './json.ts'
import { errorResult, type ToolErrorInfo, type ToolFailure, type ToolResult, ToolResultError } from './result.ts'
import type { ToolRuntime } from './runtime.ts'
import { t } from './schema.ts'
import { sdkUsage } from './sdk.ts'
import { stripTypes } from './strip.ts'
import { defineTool, type ExecutionToken, RUN_CODE, type ToolDefinition, type ToolRun } from './tool.ts'

export type CodeFailure = NonNullable<ToolErrorInfo['kind']>

export interface NestedCallStart {
  outerCallId: string
  callId: string
  name: string
  arguments: Json
  agent?: Agent
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
  codeOnlyRule(collapsed: readonly string[]): string
  routeMessage(name: string, declared: boolean): string
  sdkSection(agent: Agent | undefined): string
}

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/

function binding(name: string) {
  return IDENTIFIER.test(name) ? `tools.${name}` : `tools[${JSON.stringify(name)}]`
}

/** starts nested calls in submission order: safe calls overlap up to a limit, an exclusive call runs alone */
class Scheduler {
  private running = 0
  private exclusive = false
  private queue: { mode: 'parallel' | 'exclusive'; start: (ok: boolean) => void }[] = []
  private closed = false

  constructor(private limit: number) {}

  /** resolves true when the call may start, false when the run settled first */
  acquire(mode: 'parallel' | 'exclusive'): Promise<boolean> {
    if (this.closed) return Promise.resolve(false)
    return new Promise((start) => {
      this.queue.push({ mode, start })
      this.pump()
    })
  }

  release(mode: 'parallel' | 'exclusive') {
    this.running--
    if (mode === 'exclusive') this.exclusive = false
    this.pump()
  }

  close() {
    this.closed = true
    for (const waiting of this.queue.splice(0)) waiting.start(false)
  }

  private pump() {
    while (this.queue.length && !this.exclusive) {
      const head = this.queue[0]
      if (head.mode === 'exclusive') {
        if (this.running > 0) return
        this.exclusive = true
      } else if (this.running >= this.limit) {
        return
      }
      this.queue.shift()
      this.running++
      head.start(true)
    }
  }
}

function renderOutput(logs: readonly string[], result: Json | undefined, hasResult: boolean) {
  const parts = [...logs]
  if (hasResult) parts.push(typeof result === 'string' ? result : JSON.stringify(result, null, 2))
  return parts.length ? parts.join('\n') : '(run_code completed with no output)'
}

function failure(kind: CodeFailure, message: string, extra: Omit<ToolErrorInfo, 'code' | 'message' | 'kind'> = {}): ToolFailure {
  const result = errorResult('CODE_RUN_FAILED', `run_code failed (${kind}): ${message}`, { ...extra, kind })
  const logs = extra.logs?.length ? `\n--- logs ---\n${extra.logs.join('\n')}` : ''
  return { ...result, content: `${result.content}${logs}` }
}

export function createRunCode(runtime: ToolRuntime): CodeMode {
  async function run(args: { code: string; description: string }, run: ToolRun) {
    const { exec } = run
    const agent = exec.agent
    const host = runtime.service('codeRuntime')
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
    const stop = () => nested.abort(run.signal.reason)
    run.signal.addEventListener('abort', stop, { once: true })
    const scheduler = new Scheduler(runtime.config.maxParallelSubCalls)
    const inflight = new Set<Promise<unknown>>()
    let settled = false
    let sequence = 0

    const call = (name: string, argumentsJson: string): Promise<BridgeReply> => {
      if (settled) return Promise.resolve({ ok: false, message: `tools.${name} was called after the program finished; the call was refused` })
      const promise = nestedCall(exec.token, name, argumentsJson, `${exec.callId}/${++sequence}`)
      inflight.add(promise)
      promise.finally(() => inflight.delete(promise))
      return promise
    }

    // a nested sub-dispatch: the whole pipeline again, with the program's token as parent (so it never collapses)
    const nestedCall = async (parent: ExecutionToken, name: string, argumentsJson: string, callId: string): Promise<BridgeReply> => {
      let parsed: unknown
      try {
        parsed = JSON.parse(argumentsJson)
      } catch {
        return { ok: false, message: `${binding(name)}: the argument did not arrive as JSON`, code: 'INVALID_ARGUMENTS' }
      }
      const mode = runtime.executionMode({ name, arguments: parsed, agent, parent })
      if (!(await scheduler.acquire(mode))) return { ok: false, message: `${binding(name)} was refused: the program finished before the call could start` }
      const started = { outerCallId: exec.callId, callId, name, arguments: parsed as Json, agent, startedAt: Date.now() }
      runtime.notify('code/call-start', agent, started)
      const begin = performance.now()
      let result: ToolResult
      try {
        result = await runtime.execute({ callId, name, arguments: parsed, signal: nested.signal, agent, parent })
      } finally {
        scheduler.release(mode)
      }
      runtime.notify('code/call-settle', agent, { ...started, result, durationMs: performance.now() - begin })
      if (result.isError) return { ok: false, message: result.error.message, code: result.error.code }
      return { ok: true, value: JSON.stringify(result.value) }
    }

    let outcome: CodeRunOutcome
    try {
      outcome = await host.run({ code: stripped.code, tools: names, call, signal: run.signal, limits: runtime.codeLimits })
    } catch (error) {
      outcome = { ok: false, kind: 'crash', message: error instanceof Error ? error.message : String(error), logs: [] }
    } finally {
      // settlement: refuse what comes later, abort what is outstanding, and drain it before returning
      settled = true
      scheduler.close()
      nested.abort(new Error('run_code settled'))
      run.signal.removeEventListener('abort', stop)
    }
    while (inflight.size) await Promise.allSettled([...inflight])

    if (!outcome.ok) {
      const { kind, message, logs, line, column } = outcome
      throw new ToolResultError(failure(kind, message, { logs, line, column }))
    }
    let result: Json | undefined
    if (outcome.result !== undefined) {
      try {
        result = JSON.parse(outcome.result)
      } catch {
        throw new ToolResultError(failure('crash', 'the sandbox returned a result that is not JSON text', { logs: outcome.logs }))
      }
    }
    return outcome.result === undefined ? { logs: outcome.logs } : { logs: outcome.logs, result: result as Json }
  }

  const definition = defineTool({
    name: RUN_CODE,
    description:
      "Run a TypeScript program that calls this deployment's tools through the typed `tools` SDK described in the system prompt. " +
      'The code is the body of an async function: use await and return freely. Only what it returns or prints with console.log comes back.',
    parameters: t.object({
      code: t.string({ minLength: 1 }).describe('the body of an async TypeScript function; call tools as `await tools.name(args)`'),
      description: t.string({ minLength: 1 }).describe('one short line saying what the program does, shown to people who approve or audit it'),
    }),
    output: {
      schema: t.object({ logs: t.array(t.string()), result: t.unknown().optional() }),
      render: (_, value) => renderOutput(value.logs, value.result, 'result' in value),
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
    codeOnlyRule(collapsed) {
      const example = collapsed[0] ?? 'read'
      return [
        '## How to call tools here',
        `Tools in this deployment are reached only through code. The one tool you can call directly is \`${RUN_CODE}\`: pass it a TypeScript program,`,
        `and inside that program call every other tool through the SDK, e.g. \`await ${binding(example)}({ ... })\`.`,
        `A direct call to any other tool name (${collapsed
          .slice(0, 8)
          .map((n) => `\`${n}\``)
          .join(', ')}${collapsed.length > 8 ? ', ...' : ''}) is rejected with UNKNOWN_TOOL.`,
        'Guidance elsewhere in this prompt that names a tool describes what that tool does; reach it through the SDK.',
      ].join('\n')
    },
    sdkSection(agent) {
      return ['## The tools SDK (for run_code programs)', sdkUsage(), '', '```ts', runtime.sdkDeclarations(agent), '```'].join('\n')
    },
  }
}
