// OpenTelemetry spans for what a deployment does: one per tool call, one per nested call (a child of its run_code
// call's span), one per model request of the agent loop. only @opentelemetry/api is used: the deployment brings the
// SDK and the exporter (or none: then the API's no-op tracer makes this plugin nearly free).

import { readFileSync } from 'node:fs'
import type { ModelRequestInfo, ModelResponseInfo } from '@faber/agent'
import { defineConfig, type Execution, type ExecutionToken, messageOf, RUN_CODE, type ToolResult } from '@faber/core'
import { type Attributes, context, type Context as OtelContext, type Span, SpanKind, SpanStatusCode, type Tracer, trace } from '@opentelemetry/api'
import { type Context, Schema } from 'cordis'

// the instrumentation scope's version: this package's, read beside src/ and dist/ alike
const VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version

export const name = 'otel'
export const inject = ['tools']
export const reusable = false

export interface Config {
  tracerName: string
  modelRequests: boolean
  stageEvents: boolean
}

export interface ConfigInput {
  tracerName?: string
  modelRequests?: boolean
  stageEvents?: boolean
}

export const Config = defineConfig<Config, ConfigInput>()(
  Schema.object({
    tracerName: Schema.string().default('@faber/plugin-otel').description('the instrumentation scope the spans are recorded under'),
    modelRequests: Schema.boolean().default(true).description('a span per model request of the agent loop (@faber/agent)'),
    stageEvents: Schema.boolean().default(true).description("a span event per stage decision of a call's trace (who allowed, asked, denied, and why)"),
  }),
)

/** attribute names, exported so tests and dashboards spell them the same way */
export const ATTR = {
  operation: 'gen_ai.operation.name',
  tool: 'gen_ai.tool.name',
  callId: 'gen_ai.tool.call.id',
  model: 'gen_ai.request.model',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
  finishReasons: 'gen_ai.response.finish_reasons',
  errorType: 'error.type',
  agent: 'faber.agent',
  mode: 'faber.mode',
  nested: 'faber.nested',
  rootCallId: 'faber.root_call_id',
  line: 'faber.call.line',
  column: 'faber.call.column',
  plugin: 'faber.tool.plugin',
  outcome: 'faber.outcome',
  errorCode: 'faber.error.code',
  toolCode: 'faber.error.tool_code',
  failureKind: 'faber.error.kind',
  deniedByStage: 'faber.denied_by.stage',
  deniedByPlugin: 'faber.denied_by.plugin',
  withheldByStage: 'faber.withheld_by.stage',
  withheldByPlugin: 'faber.withheld_by.plugin',
  approval: 'faber.approval',
  session: 'faber.session',
  turn: 'faber.turn',
  step: 'faber.step',
  toolCalls: 'faber.tool_calls',
  stage: 'faber.stage',
  decision: 'faber.decision',
  by: 'faber.by',
  reason: 'faber.reason',
} as const

/** the name of a call's stage-decision span events */
export const STAGE_EVENT = 'faber.stage'

// reasons and messages come from policies and models: keep them readable but bounded
const MAX_TEXT = 1000

function bounded(text: string) {
  return text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT)}…` : text
}

/**
 * ok, error (the call ran or tried to and failed), denied (a policy refused it before its body ran; `deniedBy` says
 * which) or withheld (the body ran, then a participant kept its result from the model; `withheldBy` says which)
 */
export function outcomeOf(result: ToolResult): 'ok' | 'error' | 'denied' | 'withheld' {
  if (!result.isError) return 'ok'
  const { code } = result.error
  return code === 'DENIED' ? 'denied' : code === 'RESULT_WITHHELD' ? 'withheld' : 'error'
}

export function apply(ctx: Context, config: Config) {
  const tracer: Tracer = trace.getTracer(config.tracerName, VERSION)
  const tools = ctx.tools
  /** spans of calls between tools/pre-execute and tools/result */
  const open = new Map<ExecutionToken, Span>()
  /** the context a run_code call's nested calls start in; kept after it ends so a late nested call still links to it */
  const programs = new WeakMap<ExecutionToken, OtelContext>()
  const requests = new Map<ModelRequestInfo, Span>()

  function startCall(exec: Execution): Span {
    const parent = (exec.parent && programs.get(exec.parent)) || context.active()
    const attributes: Attributes = {
      [ATTR.operation]: 'execute_tool',
      [ATTR.tool]: exec.name,
      [ATTR.callId]: exec.callId,
      [ATTR.mode]: tools.modeFor(exec.agent),
      [ATTR.nested]: exec.parent !== undefined,
      [ATTR.rootCallId]: exec.rootCallId,
    }
    if (exec.agent) attributes[ATTR.agent] = exec.agent.name
    if (exec.tool.plugin) attributes[ATTR.plugin] = exec.tool.plugin
    if (exec.site) {
      attributes[ATTR.line] = exec.site.line
      attributes[ATTR.column] = exec.site.column
    }
    const span = tracer.startSpan(`execute_tool ${exec.name}`, { kind: SpanKind.INTERNAL, attributes }, parent)
    if (exec.name === RUN_CODE) programs.set(exec.token, trace.setSpan(parent, span))
    return span
  }

  // first, so the span also covers the other deciders and the approval wait. an observer never decides: a throw
  // here would deny the call, so nothing escapes
  tools.listen(
    'tools/pre-execute',
    (exec) => {
      try {
        open.set(exec.token, startCall(exec))
      } catch (error) {
        // the tracer is the deployer's SDK: messageOf reads whatever it threw, and never throws itself
        ctx.logger('otel').warn('could not start the span of "%s": %s', exec.name, messageOf(error))
      }
    },
    { prepend: true },
  )

  tools.listen('tools/result', (exec, result) => {
    // a call that ended at create (unknown, collapsed, invalid arguments, cancelled) never reached pre-execute
    const span = open.get(exec.token) ?? startCall(exec)
    open.delete(exec.token)
    const outcome = outcomeOf(result)
    span.setAttribute(ATTR.outcome, outcome)
    let approval: string | undefined
    for (const record of result.trace ?? []) {
      if (record.stage === 'approval') approval = record.decision
      if (!config.stageEvents) continue
      const attributes: Attributes = { [ATTR.stage]: record.stage, [ATTR.decision]: record.decision }
      if (record.by !== undefined) attributes[ATTR.by] = record.by
      if (record.reason !== undefined) attributes[ATTR.reason] = bounded(record.reason)
      span.addEvent(STAGE_EVENT, attributes)
    }
    if (approval !== undefined) span.setAttribute(ATTR.approval, approval)
    if (result.isError) {
      const { code, toolCode, kind, deniedBy, withheldBy, message } = result.error
      span.setAttributes({ [ATTR.errorType]: code, [ATTR.errorCode]: code })
      if (toolCode !== undefined) span.setAttribute(ATTR.toolCode, toolCode)
      if (kind !== undefined) span.setAttribute(ATTR.failureKind, kind)
      if (deniedBy) span.setAttributes({ [ATTR.deniedByStage]: deniedBy.stage, [ATTR.deniedByPlugin]: deniedBy.plugin })
      if (withheldBy) span.setAttributes({ [ATTR.withheldByStage]: withheldBy.stage, [ATTR.withheldByPlugin]: withheldBy.plugin })
      span.setStatus({ code: SpanStatusCode.ERROR, message: bounded(message) })
    }
    span.end()
  })

  if (config.modelRequests) {
    ctx.on('agent/model-request', (request) => {
      const attributes: Attributes = {
        [ATTR.operation]: 'chat',
        [ATTR.model]: request.model,
        [ATTR.session]: request.session,
        [ATTR.turn]: request.turn,
        [ATTR.step]: request.step,
      }
      if (request.agent) attributes[ATTR.agent] = request.agent.name
      requests.set(request, tracer.startSpan(`chat ${request.model}`, { kind: SpanKind.CLIENT, attributes }, context.active()))
    })
    ctx.on('agent/model-response', (response: ModelResponseInfo) => {
      const span = requests.get(response.request)
      if (!span) return
      requests.delete(response.request)
      span.setAttribute(ATTR.toolCalls, response.toolCalls)
      if (response.usage) {
        span.setAttributes({ [ATTR.inputTokens]: response.usage.promptTokens, [ATTR.outputTokens]: response.usage.completionTokens })
      }
      if (response.finishReason !== undefined) span.setAttribute(ATTR.finishReasons, [response.finishReason])
      if (response.error !== undefined) {
        span.setAttribute(ATTR.errorType, response.aborted ? 'aborted' : 'model_error')
        span.setStatus({ code: SpanStatusCode.ERROR, message: bounded(response.error) })
      }
      span.end()
    })
  }

  // spans still open when the plugin stops are ended, marked so, rather than leaked
  ctx.on('dispose', () => {
    for (const span of [...open.values(), ...requests.values()]) {
      span.setAttribute(ATTR.outcome, 'unfinished')
      span.end()
    }
    open.clear()
    requests.clear()
  })
}

/** it exports spans and decides nothing: faber replay leaves it out, so no span reaches the collector */
export const replay = 'omit'

export default { name, inject, reusable, Config, apply, replay }
