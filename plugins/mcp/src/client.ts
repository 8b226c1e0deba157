// the MCP client: each configured server's tools become Faber tools, called through the normal pipeline.

// messageOf: core's, which never throws in turn; a plugin's listener or the SDK may hand this client anything
import {
  type Agent,
  defineConfig,
  type Execution,
  errorResult,
  type Json,
  messageOf,
  type ToolAnnotations,
  type ToolDefinition,
  ToolResultError,
} from '@faber/core'
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import {
  CreateMessageRequestSchema,
  type CreateMessageResult,
  ElicitRequestSchema,
  type ElicitResult,
  ErrorCode,
  McpError,
  type Tool,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js'
import { type Context, type Logger, Schema } from 'cordis'
import { renderContent } from './content.ts'
import { AuthorizationRequired, type McpAuth, memoryRecord, OAuthCallback, OAuthTable, StoredOAuthProvider } from './oauth.ts'
import McpReplayed, { FABER_NAME, replayConfig, toolPrefix } from './replay.ts'
import { type McpSampling, sample } from './sampling.ts'
import { importSchema } from './schema.ts'

export type ServerState = 'connecting' | 'ready' | 'restarting' | 'failed' | 'closed'

export interface McpStatus {
  server: string
  state: ServerState
  /** the Faber names of the server's registered tools */
  tools: string[]
  /** why the server is not ready, when it is not */
  error?: string
  /** restart attempts since the server was last stable */
  attempt: number
  /** the process id of a stdio server while it runs */
  pid?: number
}

declare module 'cordis' {
  interface Events {
    /** a configured MCP server changed state or its tool set */
    'mcp/status'(status: McpStatus): void
    /** a server with `auth.interactive` needs a person to open `url` and authorize; the callback waits for them */
    'mcp/authorize'(request: { server: string; url: string }): void
  }
}

/** what the client needs of @faber/plugin-approval's service to route a server's questions to the answerers */
interface FormAsker {
  elicit(request: {
    source: string
    message: string
    schema: unknown
    agent?: Agent
    during?: string[]
    calls?: readonly Execution[]
    signal: AbortSignal
  }): Promise<ElicitResult>
}

/** one tools/call in flight: its time budget is paused while the server waits for a person's answer */
interface InFlight {
  tool: string
  exec: Execution
  remaining: number
  started: number
  timer?: ReturnType<typeof setTimeout>
  expire: () => void
}

// longer than any budget; the SDK's own request timeout would fire while a person answers a form
const NO_SDK_TIMEOUT = 2 ** 31 - 1
// authorizations in a row for one request: the first grant, a step-up, and one more before giving up
const MAX_AUTHORIZATIONS = 3
// how long closing waits for an HTTP server to acknowledge the end of its session
const SESSION_END_MS = 1000

/** an error whose code travels as the result's `toolCode` */
class McpCallError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message)
  }
}

const STDERR_TAIL = 2000

// a plain error with a code: McpError would put its "MCP error -32600:" prefix into the message sent
const refuse = (code: number, message: string) => Object.assign(new Error(message), { code })

/** MCP's hints as Faber's; both are hints only */
export function mapAnnotations(annotations: Tool['annotations']): ToolAnnotations {
  const mapped: ToolAnnotations = {}
  if (!annotations) return mapped
  if (typeof annotations.readOnlyHint === 'boolean') mapped.readOnly = annotations.readOnlyHint
  if (typeof annotations.destructiveHint === 'boolean') mapped.destructive = annotations.destructiveHint
  if (typeof annotations.idempotentHint === 'boolean') mapped.idempotent = annotations.idempotentHint
  if (typeof annotations.openWorldHint === 'boolean') mapped.openWorld = annotations.openWorldHint
  return mapped
}

/** one configured server: its process (or URL), its client, its registered tools and its restarts */
export class McpConnection {
  state: ServerState = 'connecting'
  attempt = 0
  lastError?: string
  private client?: Client
  private transport?: Transport
  private stderr = ''
  private registered = new Map<string, { key: string; dispose: () => void }>()
  private timer?: ReturnType<typeof setTimeout>
  private stableTimer?: ReturnType<typeof setTimeout>
  private closing = false
  private generation = 0
  // what each call's MCP content rendered to, keyed by the call's frozen arguments (render gets only args and value)
  private rendered = new WeakMap<object, { value: string; text: string }>()
  private inflight = new Set<InFlight>()
  // forms this server is waiting on: while any is open, the calls' clocks stop
  private asking = 0
  private oauth?: StoredOAuthProvider
  private callback?: OAuthCallback
  // the code a person's browser will bring back to the callback, while an interactive authorization is under way
  private pendingCode?: Promise<string>

  constructor(
    private ctx: Context,
    readonly config: McpServerConfig,
    private options: Config,
    private logger: Logger,
  ) {}

  get prefix() {
    return toolPrefix(this.config)
  }

  /** the Faber names of the tools this server contributes */
  toolNames() {
    return [...this.registered.keys()].sort()
  }

  /** the process id of a stdio server, while it runs */
  get pid(): number | null {
    return this.transport instanceof StdioClientTransport ? this.transport.pid : null
  }

  /** connects once; failures are reported and retried with backoff, never thrown */
  async start() {
    const generation = ++this.generation
    this.state = this.attempt ? 'restarting' : 'connecting'
    try {
      await this.connect(generation)
    } catch (error) {
      if (generation !== this.generation || this.closing) return
      if (AuthorizationRequired.isInstance(error)) {
        // no restart can fix this: a person has to authorize first
        this.state = 'failed'
        this.lastError = error.message
        this.logger.error(error.message)
        this.report()
        return
      }
      this.lost(`could not connect: ${messageOf(error)}`)
    }
  }

  /** the OAuth provider of a URL server with `auth`, its state in the deployment's store (in memory without one) */
  private async authProvider(endpoint: URL): Promise<StoredOAuthProvider | undefined> {
    const auth = this.config.auth
    if (!auth) return undefined
    if (!this.oauth) {
      const store = this.ctx.get('store')?.connection
      if (!store) this.logger.warn('server "%s": no @faber/store is loaded, so its OAuth tokens are kept in memory only', this.config.name)
      const record = store ? new OAuthTable(store).record(this.config.name, endpoint.href) : memoryRecord()
      this.oauth = new StoredOAuthProvider(record, auth, (url) => this.redirect(url))
    }
    if (auth.interactive && auth.grant === 'authorization_code' && !this.callback) {
      this.callback = await OAuthCallback.listen(auth.callbackPort)
      this.oauth.callbackUrl = this.callback.url
    }
    return this.oauth
  }

  /** the SDK sends a person to `url`: with a callback listening, announce it and wait; otherwise `faber mcp login` is the way */
  private redirect(url: URL) {
    if (!this.callback || !this.config.auth) throw new AuthorizationRequired(this.config.name, url)
    const pending = this.callback.expect(url.searchParams.get('state') ?? '', this.config.auth.authorizeTimeoutMs)
    pending.catch(() => {})
    this.pendingCode = pending
    this.logger.warn('server "%s" needs authorization: open %s', this.config.name, url.href)
    this.ctx.emit('mcp/authorize', { server: this.config.name, url: url.href })
  }

  /** after an UnauthorizedError: when a person is authorizing, wait for the code, exchange it, and say to try again */
  private async completeAuthorization(transport: Transport, error: unknown): Promise<boolean> {
    const pending = this.pendingCode
    if (!(error instanceof UnauthorizedError) || !pending || !(transport instanceof StreamableHTTPClientTransport)) return false
    this.pendingCode = undefined
    this.pause(+1)
    let code: string
    try {
      code = await pending
    } finally {
      this.pause(-1)
    }
    await transport.finishAuth(code)
    return true
  }

  /** runs a request, again after each authorization it needed (a first grant, a scope step-up), a few times at most */
  private async authorized<T>(transport: Transport | undefined, request: () => Promise<T>): Promise<T> {
    for (let round = 1; ; round++) {
      try {
        return await request()
      } catch (error) {
        if (round < MAX_AUTHORIZATIONS && (await this.completeAuthorization(transport as Transport, error))) continue
        throw error
      }
    }
  }

  private async makeTransport(): Promise<Transport> {
    const { command, args, env, cwd, url } = this.config
    if (url) {
      const endpoint = new URL(url)
      const authProvider = await this.authProvider(endpoint)
      return new StreamableHTTPClientTransport(endpoint, authProvider ? { authProvider, fetch: authProvider.watch(endpoint) } : undefined)
    }
    if (!command) throw new TypeError(`MCP server "${this.config.name}": give a command (stdio) or a url (streamable HTTP)`)
    const transport = new StdioClientTransport({ command, args, env, cwd, stderr: 'pipe' })
    this.stderr = ''
    transport.stderr?.on('data', (chunk: Buffer) => {
      const text = chunk.toString()
      this.logger.debug('[%s stderr] %s', this.config.name, text.trimEnd())
      // a replaced process (a hung one being killed) must not write into its successor's tail
      if (this.transport === transport) this.stderr = (this.stderr + text).slice(-STDERR_TAIL)
    })
    return transport
  }

  private async connect(generation: number) {
    let client: Client
    let transport: Transport
    for (let round = 1; ; round++) {
      transport = await this.makeTransport()
      client = this.makeClient()
      this.transport = transport
      try {
        await client.connect(transport, { timeout: this.config.connectTimeoutMs })
        break
      } catch (error) {
        await client.close().catch(() => {})
        if (round < MAX_AUTHORIZATIONS && (await this.completeAuthorization(transport, error))) continue
        throw error
      }
    }
    if (generation !== this.generation || this.closing) {
      await client.close().catch(() => {})
      return
    }
    client.onclose = () => {
      if (this.client !== client) return
      this.client = undefined
      this.lost(`the server closed the connection (its process exited or its stream ended)${this.stderrTail()}`)
    }
    this.client = client
    try {
      await this.syncTools(client)
    } catch (error) {
      // the server died while listing: onclose has already reported it and scheduled the restart
      if (this.client !== client) return
      this.client = undefined
      await client.close().catch(() => {})
      throw error
    }
    this.state = 'ready'
    this.lastError = undefined
    clearTimeout(this.stableTimer)
    // a server that stays up this long has recovered: later crashes start the backoff afresh
    this.stableTimer = setTimeout(() => (this.attempt = 0), this.options.restart.stableMs)
    this.stableTimer.unref?.()
    this.logger.info('server "%s" ready with %d tools', this.config.name, this.registered.size)
    this.report()
  }

  private makeClient() {
    const sampling = this.options.sampling
    const capabilities = { elicitation: { form: {} }, ...(sampling ? { sampling: {} } : {}) }
    const client = new Client({ name: 'faber', version: '0.1.0' }, { capabilities })
    client.onerror = (error) => this.logger.debug('server "%s": %s', this.config.name, messageOf(error))
    client.setRequestHandler(ElicitRequestSchema, (request, extra) => this.elicit(request.params, extra.signal))
    if (sampling) client.setRequestHandler(CreateMessageRequestSchema, (request, extra) => this.sample(sampling, request.params, extra.signal))
    // without a sampling model it is not offered (no capability): a server that asks anyway is told why, not just "method not found"
    client.fallbackRequestHandler = async (request) => {
      if (request.method !== CreateMessageRequestSchema.shape.method.value) throw refuse(ErrorCode.MethodNotFound, `Method not found: ${request.method}`)
      this.logger.warn('server "%s" asked to sample a model (sampling/createMessage); refused: no model is configured for it', this.config.name)
      const params = (request.params ?? {}) as { messages?: unknown[]; maxTokens?: number }
      this.ctx.emit('mcp/sampled', {
        server: this.config.name,
        during: [...this.inflight].map((call) => call.tool),
        model: 'none',
        outcome: 'refused',
        messages: params.messages?.length ?? 0,
        maxTokens: params.maxTokens ?? 0,
        durationMs: 0,
      })
      throw refuse(ErrorCode.InvalidRequest, 'sampling is not available: this Faber deployment configures no model for its MCP servers')
    }
    client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
      if (this.client !== client) return
      try {
        await this.syncTools(client)
      } catch (error) {
        this.logger.warn('server "%s": re-listing tools after tools/list_changed failed: %s', this.config.name, messageOf(error))
      }
    })
    return client
  }

  private stderrTail() {
    const tail = this.stderr.trim().split('\n').slice(-3).join(' | ')
    return tail ? `; last stderr: ${tail.slice(-400)}` : ''
  }

  private report() {
    this.ctx.emit('mcp/status', {
      server: this.config.name,
      state: this.state,
      tools: this.toolNames(),
      error: this.lastError,
      attempt: this.attempt,
      pid: this.pid ?? undefined,
    })
  }

  /** the connection is gone: report it and restart with bounded exponential backoff */
  private lost(reason: string) {
    if (this.closing) return
    clearTimeout(this.stableTimer)
    this.lastError = reason
    const { initialDelayMs, maxDelayMs, maxAttempts } = this.options.restart
    if (this.attempt >= maxAttempts) {
      this.state = 'failed'
      this.logger.error('server "%s" is down and will not be restarted again (%d attempts): %s', this.config.name, this.attempt, reason)
      this.report()
      return
    }
    const delay = Math.min(initialDelayMs * 2 ** this.attempt, maxDelayMs)
    this.attempt++
    this.state = 'restarting'
    this.logger.warn('server "%s" is down (%s); restart %d of %d in %d ms', this.config.name, reason, this.attempt, maxAttempts, delay)
    this.report()
    clearTimeout(this.timer)
    this.timer = setTimeout(() => this.start(), delay)
  }

  /**
   * lists the server's tools (every page) and makes the registry match: unchanged tools stay registered. A ready
   * server's status is reported only when its tool set changed: servers announce list changes that change nothing
   * (server-everything does right after the handshake), and a repeated `ready` would read as a reconnect.
   */
  private async syncTools(client: Client) {
    const tools: Tool[] = []
    let cursor: string | undefined
    do {
      const page = await this.authorized(this.transport, () => client.listTools(cursor ? { cursor } : {}, { timeout: this.config.timeoutMs }))
      tools.push(...page.tools)
      cursor = page.nextCursor
    } while (cursor)
    if (this.client !== client || this.closing) return
    const wanted = new Map<string, { key: string; definition: ToolDefinition }>()
    for (const tool of tools) {
      if (tool.execution?.taskSupport === 'required') {
        this.logger.debug('server "%s": skipping tool "%s", which can only run as an MCP task', this.config.name, tool.name)
        continue
      }
      const name = `${this.prefix}${tool.name.replace(FABER_NAME, '_')}`
      if (name.length > 128 || wanted.has(name)) {
        this.logger.warn(
          'server "%s": skipping tool "%s": its Faber name "%s" is %s',
          this.config.name,
          tool.name,
          name,
          wanted.has(name) ? 'taken' : 'too long',
        )
        continue
      }
      wanted.set(name, { key: JSON.stringify(tool), definition: this.define(name, tool) })
    }
    let changed = false
    for (const [name, entry] of this.registered) {
      if (wanted.get(name)?.key === entry.key) continue
      entry.dispose()
      this.registered.delete(name)
      changed = true
    }
    for (const [name, { key, definition }] of wanted) {
      if (this.registered.has(name)) continue
      try {
        this.registered.set(name, { key, dispose: this.ctx.tools.register(definition) })
        changed = true
      } catch (error) {
        this.logger.warn('server "%s": could not register "%s": %s', this.config.name, name, messageOf(error))
      }
    }
    if (changed && this.state === 'ready') this.report()
  }

  private define(name: string, tool: Tool): ToolDefinition {
    const input = importSchema(tool.inputSchema, { object: true })
    const output = tool.outputSchema ? importSchema(tool.outputSchema) : undefined
    const degraded = [...input.degraded.map((d) => `input ${d}`), ...(output?.degraded ?? []).map((d) => `output ${d}`)]
    if (degraded.length)
      this.logger.debug('server "%s" tool "%s": parts of its schemas are typed unknown: %s', this.config.name, tool.name, degraded.join('; '))
    const annotations = mapAnnotations(tool.annotations)
    const parallel = this.options.concurrentReadOnly && annotations.readOnly === true
    return {
      name,
      description: tool.description ?? tool.title ?? '',
      parameters: input.schema,
      output: {
        schema: output?.schema ?? {},
        render: (args, value) => {
          const entry = typeof args === 'object' && args !== null ? this.rendered.get(args) : undefined
          if (entry && entry.value === JSON.stringify(value)) return entry.text
          return typeof value === 'string' ? value : JSON.stringify(value, null, 2)
        },
      },
      execute: (args, run) => this.call(tool.name, args, run),
      annotations,
      ...(parallel ? { isConcurrencySafe: () => true } : {}),
    }
  }

  /**
   * the server asks its user something (`elicitation/create`, form mode): the question goes to the deployment's
   * answerers through `ctx.approval.elicit`, and the calls in flight to this server wait without their clocks running
   */
  private async elicit(params: Record<string, unknown>, signal: AbortSignal): Promise<ElicitResult> {
    if (params.mode === 'url') throw Object.assign(new Error('this client answers form elicitation only, not url mode'), { code: ErrorCode.InvalidParams })
    const asker = this.ctx.get('approval') as Partial<FormAsker> | undefined
    if (typeof asker?.elicit !== 'function') {
      this.logger.warn('server "%s" asked its user a question; cancelled: no approval service with answerers is loaded', this.config.name)
      return { action: 'cancel' }
    }
    const calls = [...this.inflight]
    const agents = new Set(calls.map((call) => call.exec.agent))
    this.pause(+1)
    try {
      return await asker.elicit({
        source: `MCP server "${this.config.name}"`,
        message: String(params.message ?? ''),
        schema: params.requestedSchema,
        agent: agents.size === 1 ? [...agents][0] : undefined,
        during: calls.map((call) => call.tool),
        calls: calls.map((call) => call.exec),
        signal,
      })
    } finally {
      this.pause(-1)
    }
  }

  /** the server asks the deployment's sampling model something: answered without tools, and audited either way */
  private async sample(config: McpSampling, params: Parameters<typeof sample>[1], signal: AbortSignal): Promise<CreateMessageResult> {
    const started = performance.now()
    const base = {
      server: this.config.name,
      during: [...this.inflight].map((call) => call.tool),
      messages: params.messages.length,
      maxTokens: Math.min(params.maxTokens, config.maxTokens),
    }
    try {
      const answer = await sample(config, params, signal)
      const durationMs = Math.round(performance.now() - started)
      this.ctx.emit('mcp/sampled', { ...base, model: answer.model, outcome: 'answered', stopReason: answer.stopReason, usage: answer.usage, durationMs })
      return answer.result
    } catch (error) {
      const durationMs = Math.round(performance.now() - started)
      this.logger.warn('server "%s": its sampling request failed: %s', this.config.name, messageOf(error))
      this.ctx.emit('mcp/sampled', { ...base, model: config.model, outcome: 'failed', error: messageOf(error), durationMs })
      throw refuse(ErrorCode.InternalError, `sampling failed: ${messageOf(error)}`)
    }
  }

  private pause(delta: number) {
    const before = this.asking
    this.asking += delta
    if (before === 0 && this.asking > 0) for (const call of this.inflight) this.stopClock(call)
    if (before > 0 && this.asking === 0) for (const call of this.inflight) this.startClock(call)
  }

  private startClock(call: InFlight) {
    call.started = performance.now()
    call.timer = setTimeout(call.expire, call.remaining)
  }

  private stopClock(call: InFlight) {
    clearTimeout(call.timer)
    call.remaining = Math.max(0, call.remaining - (performance.now() - call.started))
  }

  /** one tools/call; every failure becomes a clear error the pipeline turns into TOOL_FAILED (or ABORTED) */
  private async call(tool: string, args: Record<string, unknown>, run: { signal: AbortSignal; exec: Execution }): Promise<Json> {
    const { signal } = run
    const client = this.client
    const where = `MCP server "${this.config.name}"`
    if (!client || this.state !== 'ready') {
      const why = this.state === 'failed' ? 'is down and no longer restarted' : 'is restarting'
      throw new McpCallError('MCP_SERVER_UNAVAILABLE', `${where} ${why}${this.lastError ? ` (${this.lastError})` : ''}; the call was not sent`)
    }
    let result: Awaited<ReturnType<Client['callTool']>>
    // the SDK never removes its abort listener, and run_code shares one signal across a program's calls: give it its own
    const own = new AbortController()
    const forward = () => own.abort(signal.reason)
    if (signal.aborted) forward()
    else signal.addEventListener('abort', forward, { once: true })
    let timedOut = false
    const call: InFlight = {
      tool: `${this.prefix}${tool}`,
      exec: run.exec,
      remaining: this.config.timeoutMs,
      started: 0,
      expire: () => {
        timedOut = true
        own.abort(new McpError(ErrorCode.RequestTimeout, 'Request timed out'))
      },
    }
    this.inflight.add(call)
    if (this.asking === 0) this.startClock(call)
    try {
      const transport = this.transport
      result = await this.authorized(transport, () =>
        client.callTool({ name: tool, arguments: args }, undefined, { signal: own.signal, timeout: NO_SDK_TIMEOUT }),
      )
    } catch (error) {
      if (signal.aborted) {
        throw new ToolResultError(errorResult('ABORTED', `the call to "${this.prefix}${tool}" was cancelled while it ran; the MCP request was cancelled`))
      }
      if (timedOut || (error instanceof McpError && error.code === ErrorCode.RequestTimeout)) {
        this.checkAlive(client)
        throw new McpCallError('MCP_TIMEOUT', `${where} did not answer within ${this.config.timeoutMs} ms`)
      }
      if (AuthorizationRequired.isInstance(error)) throw new McpCallError('MCP_AUTH_REQUIRED', error.message)
      if (error instanceof McpError && error.code === ErrorCode.ConnectionClosed) {
        throw new McpCallError('MCP_SERVER_EXITED', `${where} exited while the call ran; it is being restarted${this.stderrTail()}`)
      }
      throw new McpCallError('MCP_ERROR', `${where}: ${messageOf(error)}`)
    } finally {
      clearTimeout(call.timer)
      this.inflight.delete(call)
      signal.removeEventListener('abort', forward)
    }
    const text = renderContent(result.content)
    if (result.isError) throw new McpCallError('MCP_TOOL_ERROR', text || 'the tool reported an error without a message')
    const value = (result.structuredContent ?? text) as Json
    this.rendered.set(args, { value: JSON.stringify(value), text })
    return value
  }

  /** after a timeout: a server that does not answer a ping either is hung, so it is restarted */
  private checkAlive(client: Client) {
    client.ping({ timeout: Math.min(this.config.timeoutMs, 5000) }).catch(() => {
      if (this.client !== client || this.closing) return
      this.client = undefined
      this.lost(`the server stopped answering (a call timed out and a ping failed)${this.stderrTail()}`)
      client.close().catch(() => {})
    })
  }

  /** closes the server and removes its tools */
  async close() {
    this.closing = true
    this.generation++
    clearTimeout(this.timer)
    clearTimeout(this.stableTimer)
    const client = this.client
    this.client = undefined
    for (const entry of this.registered.values()) entry.dispose()
    this.registered.clear()
    this.state = 'closed'
    this.pendingCode = undefined
    this.callback?.close()
    this.callback = undefined
    // over streamable HTTP the session is the server's to keep until told: end it (a server may refuse, 405), briefly
    const transport = this.transport
    if (client && transport instanceof StreamableHTTPClientTransport && transport.sessionId) {
      let timer: ReturnType<typeof setTimeout> | undefined
      const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, SESSION_END_MS)))
      await Promise.race([transport.terminateSession().catch(() => {}), late])
      clearTimeout(timer)
    }
    await (client ?? { close: async () => this.transport?.close() }).close().catch(() => {})
  }
}

export const name = 'mcp'
// the store keeps OAuth clients and tokens when it is loaded
export const inject = { tools: { required: true }, store: { required: false } }
// loaded once per agent that should see a server's tools
export const reusable = true

/** one server, as a deployer writes it */
export interface McpClientServer {
  /** names the server in messages and, by default, in the tool-name prefix */
  name: string
  command?: string
  args?: string[]
  env?: Record<string, string>
  cwd?: string
  /** a streamable HTTP endpoint instead of a command */
  url?: string
  /** put before each tool name; default `<name>__` */
  prefix?: string
  /** time budget of one request to the server; default 60 s */
  timeoutMs?: number
  connectTimeoutMs?: number
  /** OAuth for a URL server that requires it */
  auth?: Partial<McpAuth>
}

export interface McpRestart {
  initialDelayMs: number
  maxDelayMs: number
  /** restarts in a row before a server is given up */
  maxAttempts: number
  /** uptime after which a server counts as recovered */
  stableMs: number
}

/** a server as `apply` gets it, defaults filled in */
export type McpServerConfig = Omit<McpClientServer, 'auth'> & { timeoutMs: number; connectTimeoutMs: number; auth?: McpAuth }

/** what a deployer writes: every key optional */
export interface ConfigInput {
  servers?: McpClientServer[]
  restart?: Partial<McpRestart>
  concurrentReadOnly?: boolean
  sampling?: Partial<McpSampling> & { model: string }
}

export interface Config {
  servers: McpServerConfig[]
  restart: McpRestart
  concurrentReadOnly: boolean
  sampling?: McpSampling
}

const RESTART: McpRestart = { initialDelayMs: 500, maxDelayMs: 30000, maxAttempts: 5, stableMs: 60000 }

const AuthSchema = Schema.object({
  grant: Schema.union(['authorization_code', 'client_credentials'] as const)
    .default('authorization_code')
    .description('authorization_code: a person signs in (PKCE); client_credentials: machine to machine'),
  clientId: Schema.string().description('a pre-registered client; without one the client registers itself (dynamic registration)'),
  clientSecret: Schema.string().description("the pre-registered client's secret (prefer clientSecretEnv)"),
  clientSecretEnv: Schema.string().description('the environment variable holding the client secret'),
  privateKey: Schema.string().description('a PEM (PKCS#8) private key: authenticate with a signed JWT (private_key_jwt) instead of a secret'),
  privateKeyEnv: Schema.string().description('the environment variable holding privateKey'),
  signingAlgorithm: Schema.string().default('RS256').description('the JWT signing algorithm for privateKey (RS256, ES256, ...)'),
  clientMetadataUrl: Schema.string().description('an https URL of a client ID metadata document, used as client_id where supported'),
  scope: Schema.string().description('the scope asked for when the server does not say which it needs'),
  clientName: Schema.string().default('Faber'),
  callbackPort: Schema.natural().max(65535).default(0).description('the port of the callback on 127.0.0.1; 0: a free one'),
  interactive: Schema.boolean().default(false).description('wait for a person to authorize (URL printed, mcp/authorize emitted) instead of failing'),
  authorizeTimeoutMs: Schema.natural().min(1).default(300000).description('how long a person has to authorize'),
})

const ServerSchema = Schema.object({
  name: Schema.string().required().description('the server name, used in messages and the default tool-name prefix'),
  command: Schema.string().description('the executable of a stdio server'),
  args: Schema.array(Schema.string()).default([]),
  env: Schema.dict(Schema.string()).description('environment for the server, over a safe default set (PATH, HOME, ...)'),
  cwd: Schema.string(),
  url: Schema.string().description('a streamable HTTP endpoint, instead of a command'),
  prefix: Schema.string().description('put before each tool name; default `<name>__`'),
  timeoutMs: Schema.natural().min(1).default(60000).description('time budget of one request to the server'),
  connectTimeoutMs: Schema.natural().min(1).default(30000),
  // absent unless written: a server without `auth` sends no Authorization header
  auth: Schema.union([Schema.const(undefined), AuthSchema]).description('OAuth for a streamable HTTP server that requires it'),
})

export const Config = defineConfig<Config, ConfigInput>()(
  Schema.object({
    servers: Schema.array(ServerSchema).default([]),
    restart: Schema.object({
      initialDelayMs: Schema.natural().min(1).default(RESTART.initialDelayMs),
      maxDelayMs: Schema.natural().min(1).default(RESTART.maxDelayMs),
      maxAttempts: Schema.natural().default(RESTART.maxAttempts).description('restarts in a row before a server is given up'),
      stableMs: Schema.natural().min(1).default(RESTART.stableMs).description('uptime after which a server counts as recovered'),
    }).default(RESTART),
    concurrentReadOnly: Schema.boolean().default(true).description('let calls to tools hinted readOnly overlap inside run_code'),
    // absent unless written: then sampling is not offered, and a server that asks is refused
    sampling: Schema.union([
      Schema.const(undefined),
      Schema.object({
        provider: Schema.union(['openai', 'anthropic'] as const).default('openai'),
        baseURL: Schema.string().description("the endpoint; default OpenAI's, or Anthropic's"),
        model: Schema.string().required(),
        apiKeyEnv: Schema.string().description('the environment variable holding the API key'),
        maxTokens: Schema.natural().min(1).default(1024).description('a cap on the tokens one request may ask for'),
        timeoutMs: Schema.natural().min(1),
        maxRetries: Schema.natural(),
      }),
    ]).description("the model imported servers' sampling/createMessage requests go to"),
  }),
)

export async function apply(ctx: Context, config: Config) {
  const logger = ctx.logger('mcp')
  const names = new Set<string>()
  for (const server of config.servers) {
    if (names.has(server.name)) throw new TypeError(`@faber/plugin-mcp: two servers are named "${server.name}"; server names must be unique`)
    names.add(server.name)
    if (!server.command === !server.url)
      throw new TypeError(`@faber/plugin-mcp: server "${server.name}" needs exactly one of command (stdio) or url (streamable HTTP)`)
    if (server.auth && !server.url) throw new TypeError(`@faber/plugin-mcp: server "${server.name}": auth applies to a url server only`)
  }
  const connections = config.servers.map((server) => new McpConnection(ctx, server, config, logger))
  ctx.effect(() => () => {
    for (const connection of connections) connection.close()
  })
  await Promise.all(connections.map((connection) => connection.start()))
}

/** faber replay starts no server: a stand-in registers the tools recorded calls name under a server's prefix */
export const replay = { plugin: McpReplayed, config: replayConfig }

/** the MCP client plugin as one object, for `ctx.plugin(Mcp, config)` with a default import */
export default { name, inject, reusable, Config, apply, replay }
