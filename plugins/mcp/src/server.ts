// the MCP server: one agent's view (or the global one) served to any MCP client. tools/list is exactly what the
// registry's wire shows that agent; tools/call runs through `ctx.tools.execute`, so every policy applies.

import { randomUUID } from 'node:crypto'
import type { CallLog } from '@faber/agent'
import {
  Agent,
  type ApprovalOutcome,
  type ApprovalRequest,
  type ApprovalService,
  CODE_ONLY_SECTION,
  errorResult,
  type Json,
  RUN_CODE,
  SDK_SECTION,
  type ToolResult,
  waitOnPerson,
} from '@faber/core'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { Protocol } from '@modelcontextprotocol/sdk/shared/protocol.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import { ErrorCode, ListToolsRequestSchema, type LoggingLevel, McpError, SetLevelRequestSchema, type Tool } from '@modelcontextprotocol/sdk/types.js'
import { type Context, Logger } from 'cordis'
import { z } from 'zod'
import { toCallToolResult } from './content.ts'
import { LineTransport } from './stdio.ts'

export interface ServeOptions {
  /** the agent (or its name) whose view is served; the global view when left out */
  agent?: Agent | string
  /** `stdio` (this process's stdin/stdout) or any MCP SDK transport; default `stdio` */
  transport?: 'stdio' | Transport
  /** the server name clients are shown; default `faber` */
  name?: string
  version?: string
  /** route approval `ask`s of this client's calls to MCP elicitation when the client supports it; default true */
  elicitation?: boolean
  /** how long a person may take to answer an elicitation; default 10 minutes */
  elicitationTimeoutMs?: number
  /** on stdio, the largest message accepted in bytes; larger ones are refused with an error reply; default 4 MiB */
  maxMessageBytes?: number
  /**
   * writes this server's calls to a session log (a CallLog of `@faber/agent`, for the served agent; one for all the
   * sessions of a server): a run_code program checkpointed while it waited on a person is then durable, and a client
   * calling run_code again with the same arguments after a restart gets it run again from the log
   */
  calls?: CallLog
}

export interface McpServing {
  readonly server: Server
  /** the tools/list answer as it stands */
  listTools(): Tool[]
  /** stops serving and detaches from the deployment */
  close(): Promise<void>
  /** resolves when the client goes away or close() is called */
  readonly closed: Promise<void>
}

// what an MCP client shows next to a tool, from Faber's hints
function mcpAnnotations(annotations: Record<string, unknown> | undefined): Tool['annotations'] {
  const hints: NonNullable<Tool['annotations']> = {}
  if (typeof annotations?.readOnly === 'boolean') hints.readOnlyHint = annotations.readOnly
  if (typeof annotations?.destructive === 'boolean') hints.destructiveHint = annotations.destructive
  if (typeof annotations?.idempotent === 'boolean') hints.idempotentHint = annotations.idempotent
  if (typeof annotations?.openWorld === 'boolean') hints.openWorldHint = annotations.openWorld
  return Object.keys(hints).length ? hints : undefined
}

// run_code's description must carry what the model needs to use it: the code-only rule and the SDK
const RUN_CODE_SECTIONS = new Set([CODE_ONLY_SECTION, SDK_SECTION])

/** the tools/list answer for an agent: `wire(agent).tools`, run_code described with the SDK */
export function wireTools(ctx: Context, agent?: Agent): Tool[] {
  const wire = ctx.tools.wire(agent)
  const sections = [...wire.sections]
    .filter((s) => RUN_CODE_SECTIONS.has(s.id) && s.text)
    .sort((a, b) => a.order - b.order)
    .map((s) => s.text)
  return wire.tools.map((tool) => {
    const description = tool.name === RUN_CODE && sections.length ? [tool.description, ...sections].join('\n\n') : tool.description
    const annotations = mcpAnnotations(ctx.tools.get(tool.name, agent)?.annotations)
    return {
      name: tool.name,
      description,
      inputSchema: tool.parameters as Tool['inputSchema'],
      ...(annotations ? { annotations } : {}),
    }
  })
}

// the answer shape of @faber/plugin-approval's `approval/request` answerers
type ElicitedAnswer = { decision: 'allow' | 'reject'; remember?: 'session'; note: string } | undefined

const APPROVAL_SCHEMA = {
  type: 'object' as const,
  properties: {
    approve: { type: 'boolean' as const, title: 'Approve', description: 'let this call run' },
    remember: {
      type: 'boolean' as const,
      title: 'Remember for this session',
      description: 'answer calls like this one the same way until this MCP session ends, without asking',
    },
  },
  required: ['approve'],
}

/** what the person answered: `allowed` or `rejected` to remember for the rest of the MCP session, with `remember` */
type Elicited = { outcome: ApprovalOutcome; remember: boolean }

/** asks the person behind an MCP client whether a call may run, through elicitation */
export async function elicitApproval(
  server: Server,
  request: ApprovalRequest,
  options: { timeoutMs?: number; relatedRequestId?: string | number } = {},
): Promise<ApprovalOutcome> {
  return (await elicitAnswer(server, request, options)).outcome
}

async function elicitAnswer(server: Server, request: ApprovalRequest, options: { timeoutMs?: number; relatedRequestId?: string | number }): Promise<Elicited> {
  const outcome = (outcome: ApprovalOutcome) => ({ outcome, remember: false })
  if (!server.getClientCapabilities()?.elicitation) return outcome('unavailable')
  // a person answers the client's form: the program that made the call stops its wall clock until they did
  const answered = waitOnPerson(request.exec)
  const lines = [`Allow the call to "${request.tool}"? It needs approval: ${request.reason}`, `Arguments: ${JSON.stringify(request.arguments)}`]
  if (request.program !== undefined) lines.push(`It was made by this run_code program:\n${request.program}`)
  try {
    const answer = await server.elicitInput(
      { message: lines.join('\n'), requestedSchema: APPROVAL_SCHEMA },
      { signal: request.signal, timeout: options.timeoutMs ?? 600_000, relatedRequestId: options.relatedRequestId },
    )
    if (answer.action === 'cancel') return outcome('cancelled')
    if (answer.action !== 'accept') return outcome('rejected')
    return { outcome: answer.content?.approve === true ? 'allowed' : 'rejected', remember: answer.content?.remember === true }
  } catch {
    return outcome(request.signal.aborted ? 'cancelled' : 'unavailable')
  } finally {
    answered()
  }
}

type Ours = (request: ApprovalRequest) => boolean

/** arguments nested deeper than this are refused before they reach the pipeline (a wire limit, not a schema rule) */
export const MAX_ARGUMENT_DEPTH = 256

/** the JSON path at which `value` first nests deeper than `max`, found without recursion */
function tooDeep(value: unknown, max: number): string | undefined {
  const stack: [unknown, string, number][] = [[value, '$', 0]]
  while (stack.length) {
    const [node, path, depth] = stack.pop()!
    if (typeof node !== 'object' || node === null) continue
    if (depth >= max) return path.length > 80 ? `${path.slice(0, 77)}...` : path
    if (Array.isArray(node)) for (let i = node.length - 1; i >= 0; i--) stack.push([node[i], `${path}[${i}]`, depth + 1])
    else for (const key of Object.keys(node)) stack.push([(node as Record<string, unknown>)[key], `${path}.${key}`, depth + 1])
  }
  return undefined
}

// tools/call as the protocol layer sees it: only the method. The SDK's own schema would turn arguments that are not
// an object into a protocol error; here they reach the pipeline, whose answer (INVALID_ARGUMENTS) the model can act on
const CallToolRequest = z.object({ method: z.literal('tools/call') }).loose()

/** the approver serveMcp mounts when the deployment has none: each serving session answers its own calls' requests */
class ElicitingApprover implements ApprovalService {
  sessions = new Map<Ours, (request: ApprovalRequest) => Promise<ApprovalOutcome>>()

  async request(request: ApprovalRequest): Promise<ApprovalOutcome> {
    for (const [ours, elicit] of this.sessions) if (ours(request)) return elicit(request)
    return 'unavailable'
  }
}

// cordis' log types as MCP's levels, and MCP's levels from least to most severe
const LOG_LEVELS: Record<string, LoggingLevel> = { debug: 'debug', info: 'info', success: 'notice', warn: 'warning', error: 'error' }
const SEVERITY: LoggingLevel[] = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency']

/**
 * MCP logging: once the client sets a level (`logging/setLevel`), the deployment's log records at or above it go to
 * that client as `notifications/message` (logger = the cordis logger's name). Before that, nothing is sent.
 */
function forwardLogs(server: Server) {
  let level: LoggingLevel | undefined
  server.setRequestHandler(SetLevelRequestSchema, (request) => {
    level = request.params.level
    return {}
  })
  const target: Logger.Target = {
    colors: 0,
    levels: { base: 3 },
    record(record) {
      const mapped = LOG_LEVELS[record.type] ?? 'info'
      if (!level || SEVERITY.indexOf(mapped) < SEVERITY.indexOf(level)) return
      server.notification({ method: 'notifications/message', params: { level: mapped, logger: record.name, data: record.content } }).catch(() => {})
    },
  }
  Logger.targets.push(target)
  return () => {
    const index = Logger.targets.indexOf(target)
    if (index >= 0) Logger.targets.splice(index, 1)
  }
}

/** sends cordis' log output and console.log to stderr (while stdout carries the protocol); returns the undo */
export function logsToStderr() {
  const targets = Logger.targets.map((target) => [target, target.print] as const)
  for (const [target] of targets) target.print = (text: string) => process.stderr.write(`${text}\n`)
  const log = console.log
  console.log = console.error
  return () => {
    for (const [target, print] of targets) target.print = print
    console.log = log
  }
}

/**
 * serves a deployment's tools over MCP. Compose the deployment (ToolRuntime, plugins, agents) and start it first;
 * the served view follows later changes of the tool set (clients get `notifications/tools/list_changed`).
 */
export async function serveMcp(ctx: Context, options: ServeOptions = {}): Promise<McpServing> {
  // the view ctx.tools gives is built once per context: holding it costs nothing per call
  const tools = ctx.tools
  // calls go through the executor, held once: no cordis proxy on the path of each call
  const executor = tools.executor
  if (!tools) throw new TypeError('serveMcp: no ToolRuntime is mounted at ctx.tools; load @faber/core and start the context first')
  const agent = typeof options.agent === 'string' ? tools.agent(options.agent) : options.agent
  if (typeof options.agent === 'string' && !agent) {
    const known = tools.agents().map((a) => `"${a.name}"`)
    throw new TypeError(`serveMcp: no agent named "${options.agent}"; agents: ${known.join(', ') || 'none'}`)
  }
  if (agent !== undefined && !(agent instanceof Agent)) throw new TypeError('serveMcp: agent must be an Agent or an agent name')
  const calls = options.calls
  if (calls && calls.agent !== agent)
    throw new TypeError(`serveMcp: options.calls records the calls of ${calls.agent ?? 'the global view'}, not of ${agent ?? 'the global view'}`)

  const logger = ctx.logger('mcp')
  const session = randomUUID().slice(0, 8)
  const server = new Server(
    { name: options.name ?? 'faber', version: options.version ?? '0.1.0' },
    {
      capabilities: { tools: { listChanged: true }, logging: {} },
    },
  )
  const disposers: (() => void)[] = [forwardLogs(server)]
  // calls of this client in flight, by call id, for the elicitation approver
  const inflight = new Map<string, string | number>()
  let sequence = 0
  let done = false

  let listed: { generation: number; tools: Tool[]; text: string } | undefined
  const listTools = () => {
    if (listed?.generation !== tools.generation) {
      const list = wireTools(ctx, agent)
      listed = { generation: tools.generation, tools: list, text: JSON.stringify(list) }
    }
    return listed.tools
  }

  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: listTools() }))
  // registered past Server's own tools/call wrapper, which would apply the SDK's strict schema first
  Protocol.prototype.setRequestHandler.call(server, CallToolRequest, async (request, extra) => {
    const params = request.params as { name?: unknown; arguments?: unknown } | undefined
    if (typeof params?.name !== 'string') throw new McpError(ErrorCode.InvalidParams, 'Invalid params: tools/call needs params.name, a string')
    const name = params.name
    const deep = tooDeep(params.arguments, MAX_ARGUMENT_DEPTH)
    if (deep !== undefined) {
      const message = `invalid arguments for "${name}": they nest deeper than ${MAX_ARGUMENT_DEPTH} levels (at ${deep}). Flatten them and call again.`
      return toCallToolResult(errorResult('INVALID_ARGUMENTS', message))
    }
    const args = (params.arguments ?? {}) as Json
    // the same program, checkpointed before a restart: run again from the log under its own call id
    const recorded = calls?.take(name, args)
    const callId = recorded?.outerCallId ?? `mcp-${session}-${++sequence}`
    inflight.set(callId, extra.requestId)
    const begin = performance.now()
    try {
      let result: ToolResult
      if (recorded) result = await calls!.again(recorded, extra.signal)
      else {
        const prepared = executor.prepare({ callId, name, arguments: args, agent, session })
        calls?.begin({ id: callId, name, arguments: JSON.stringify(args) }, { step: 0, mode: prepared.mode, session })
        result = await prepared.run(extra.signal)
      }
      // closed meanwhile: a program checkpointed in the log was left there (detach); the end of any other is not recorded
      if (!done) await calls?.end({ id: callId, name }, result, performance.now() - begin)
      return toCallToolResult(result)
    } finally {
      inflight.delete(callId)
    }
  })

  // the listeners and the fallback approver live in a plugin of their own, so inspectors and audit events name it
  // and closing disposes them all
  const scope = ctx.plugin({
    name: 'mcp-serve',
    reusable: true,
    apply(inner: Context) {
      // tell the client when what it was shown changed; bursts of registry changes coalesce into one notification
      let pending = false
      inner.on('tools/changed', () => {
        if (pending || !server.getClientCapabilities()) return
        pending = true
        queueMicrotask(() => {
          pending = false
          if (done || !inner.get('tools')) return
          const before = listed?.text
          listTools()
          if (before !== undefined && before !== listed?.text) server.sendToolListChanged().catch(() => {})
        })
      })
      // the deployment stopping ends the session
      inner.effect(() => () => void server.close().catch(() => {}))
      if (options.elicitation === false) return
      const elicit = (request: ApprovalRequest) =>
        elicitAnswer(server, request, { timeoutMs: options.elicitationTimeoutMs, relatedRequestId: inflight.get(request.exec.rootCallId) })
      const ask = async (request: ApprovalRequest) => (await elicit(request)).outcome
      const ours = (request: ApprovalRequest) => inflight.has(request.exec.rootCallId)
      const mounted = inner.get('approval') as ApprovalService | undefined
      if (mounted instanceof ElicitingApprover) {
        mounted.sessions.set(ours, ask)
        inner.effect(() => () => mounted.sessions.delete(ours))
      } else if (mounted) {
        // @faber/plugin-approval: answer this client's requests after the rules answerer (standing rules and grants
        // come first); what elicitation cannot answer is left to the answerers after this one
        const on = inner.on.bind(inner) as unknown as (event: string, listener: (query: ApprovalRequest) => Promise<ElicitedAnswer>) => () => void
        on('approval/request', async (query) => {
          if (!ours(query) || !server.getClientCapabilities()?.elicitation) return
          const { outcome, remember } = await elicit(query)
          const kept = remember ? { remember: 'session' as const } : {}
          if (outcome === 'allowed') return { decision: 'allow', ...kept, note: 'answered through MCP elicitation' }
          if (outcome === 'rejected') return { decision: 'reject', ...kept, note: 'declined through MCP elicitation' }
          if (outcome === 'cancelled') return { decision: 'reject', note: 'the MCP elicitation was dismissed' }
        })
      } else {
        // no approval service in the deployment: answer MCP clients' asks by elicitation, and nobody else's
        const approver = new ElicitingApprover()
        approver.sessions.set(ours, ask)
        inner.set('approval', approver)
      }
    },
  })
  await ctx.lifecycle.flush()
  if (scope.error) throw scope.error
  disposers.push(() => scope.dispose())

  const stdio = options.transport === undefined || options.transport === 'stdio'
  const transport = stdio
    ? new LineTransport({
        maxMessageBytes: options.maxMessageBytes,
        onproblem: (problem, severe) => (severe ? logger.error : logger.warn).call(logger, 'session %s: %s', session, problem),
      })
    : (options.transport as Transport)
  if (stdio) disposers.push(logsToStderr())

  let resolveClosed!: () => void
  const closed = new Promise<void>((resolve) => (resolveClosed = resolve))
  const detach = () => {
    if (done) return
    done = true
    // its calls were aborted by the close, not cancelled by the client: a checkpointed program stays in the log to run again
    if (calls) for (const callId of inflight.keys()) calls.leave(callId)
    for (const dispose of disposers.splice(0).reverse()) dispose()
    // what policies kept for this client's conversation (breaker streaks, session grants) goes with it
    try {
      ctx.emit('tools/session-end', { agent, session })
    } catch (error) {
      logger.warn('a tools/session-end listener threw (ignored): %s', (error as Error)?.message ?? error)
    }
    resolveClosed()
  }
  server.onclose = detach
  // on stdio, the client closing our stdin is how it hangs up: the transport closes, and with it the server
  await server.connect(transport)
  logger.debug('serving %s over MCP (session %s)', agent ? String(agent) : 'the global view', session)
  return {
    server,
    listTools,
    closed,
    async close() {
      await server.close()
      detach()
    },
  }
}
