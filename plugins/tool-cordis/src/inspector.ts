// the inspector service (`ctx.inspector`): records the call trace and disposals, builds the report on
// demand, and registers the `cordis_inspect` tool. it observes only: its pre-execute listener abstains.

import { type Agent, agentOf, defineConfig, defineTool, type Execution, type Json, pluginName, type ToolResult, type ToolRuntime, t } from '@faber/core'
import { type Context, Schema, Service } from 'cordis'
import { onDisposed } from './cordis-adapter.ts'
import { capText, SECTIONS, type Selection, select, type What } from './render.ts'
import { buildReport, type DisposedPluginReport, type Report, type ToolsReport, toolsOf } from './report.ts'
import { CallTrace, type Clock, type TraceObserver } from './trace.ts'
import { LISTEN, parseListen, serveWebView, type WebView, type WebViewOptions } from './web/server.ts'

declare module 'cordis' {
  interface Context {
    inspector: Inspector
  }
}

export const INSPECT_TOOL = 'cordis_inspect'

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const item of Object.values(value)) deepFreeze(item)
  }
  return value
}

/** what the inspector keeps; a plain object, so that the per-call observers never go through cordis' service proxy */
class Records {
  readonly trace: CallTrace
  private disposed: DisposedPluginReport[] = []
  // tool views depend only on the tool set: computed once per generation of it
  private layers = new Map<Agent | undefined, ToolsReport>()
  private generation = -1

  constructor(
    private root: Context,
    private tools: ToolRuntime,
    private config: Inspector.Config,
  ) {
    this.trace = new CallTrace(config.maxCalls, config.clock)
  }

  disposal(entry: DisposedPluginReport) {
    this.disposed.push(entry)
    if (this.disposed.length > this.config.maxDisposed) this.disposed.shift()
  }

  report(configs = false): Report {
    const live = new Set(this.tools.agents())
    return buildReport(this.root, {
      calls: this.trace.all((agent) => live.has(agent)),
      disposed: [...this.disposed],
      tools: (agent) => this.layer(agent),
      configs,
    })
  }

  private layer(agent: Agent | undefined): ToolsReport {
    const { generation } = this.tools
    if (generation !== this.generation) {
      this.layers.clear()
      this.generation = generation
    }
    let layer = this.layers.get(agent)
    if (!layer) this.layers.set(agent, (layer = deepFreeze(toolsOf(this.tools, agent))))
    return layer
  }
}

class Inspector extends Service {
  static name = 'inspector'
  static inject = ['tools']
  /** faber replay starts it without its web view (which would listen): its tool stays registered, as it was */
  static replay = { plugin: Inspector, config: (config: Inspector.ConfigInput) => ({ ...config, web: undefined }) }

  declare ctx: Context
  private records: Records
  private views = new Set<WebView>()
  private configured?: WebView

  constructor(
    ctx: Context,
    public config: Inspector.Config,
  ) {
    super(ctx, 'inspector', true)
    this.config = Inspector.Config(config ?? {})
    const records = new Records(ctx.root, ctx.tools, this.config)
    this.records = records
    const { trace } = records

    // prepended so that it runs before any deciding listener and sees every call that reaches policy; abstains
    ctx.tools.listen(
      'tools/pre-execute',
      (exec: Execution) => {
        trace.enter(exec)
      },
      { prepend: true },
    )
    ctx.tools.listen('tools/result', (exec: Execution, result: ToolResult) => trace.record(exec, result))
    const wall = this.config.clock?.wall ?? Date.now
    onDisposed(ctx, ({ name, context }) => {
      const entry: DisposedPluginReport = { name, loadedBy: pluginName(context), at: new Date(wall()).toISOString() }
      const agent = agentOf(context)
      if (agent) entry.agent = agent.name
      records.disposal(entry)
    })

    if (!this.config.tool) return
    const maxChars = this.config.maxChars
    ctx.tools.register(
      defineTool({
        name: INSPECT_TOOL,
        description:
          'Inspect this live deployment. what: plugins (tree and state), services (and who provides them), tools (what an agent can see, ' +
          'what the model is shown, the mode and where it came from, collapsed names, masks), events (listeners and their plugins), ' +
          'calls (recent calls with each stage decision), agent (one agent in full). name narrows: a plugin, service, event, agent, tool or call id. ' +
          'Without a name, tools, calls and agent describe the calling agent.',
        parameters: t.object({
          what: t.enum(SECTIONS).describe('the section to show'),
          name: t.string({ minLength: 1 }).optional().describe('narrow to this name (see the description)'),
        }),
        output: {
          schema: t.object({ what: t.string(), text: t.string(), data: t.unknown() }),
          render: (_, value) => value.text,
        },
        execute: (args, run) => {
          const selection = select(records.report(), args.what, args.name, run.exec.agent?.name)
          return { what: selection.what, text: capText(selection.text, maxChars), data: JSON.parse(JSON.stringify(selection.data)) as Json }
        },
        isConcurrencySafe: () => true,
        annotations: { readOnly: true },
      }),
    )
  }

  /** the whole report, JSON-serializable; tool views in it are frozen and shared between reports. `configs`: with each plugin's config, secrets masked */
  report(options: { configs?: boolean } = {}): Report {
    return this.records.report(options.configs)
  }

  /** told of each call as it reaches policy and as it is recorded; returns the disposer (the web view's stream) */
  observe(observer: TraceObserver): () => void {
    return this.records.trace.observe(observer)
  }

  /** serves the live web view (see the README); closed with the inspector. `config.web` starts one with the inspector */
  async serve(options: WebViewOptions = {}): Promise<WebView> {
    const view = await serveWebView(this.ctx, this, options)
    this.views.add(view)
    view.closed.then(() => this.views.delete(view))
    return view
  }

  /** the web view started by `config.web`, once it listens */
  get web(): WebView | undefined {
    return this.configured
  }

  async start() {
    const listen = this.config.web?.listen
    if (listen === undefined || listen === '') return
    this.configured = await this.serve({ ...parseListen(String(listen)), token: this.config.web?.token })
    // logs are kept and shipped: the address goes there without its token (ctx.inspector.web.url has it)
    const { host, port, token } = this.configured
    this.ctx
      .logger('inspector')
      .info('web view at http://%s:%d/%s', host.includes(':') ? `[${host}]` : host, port, token ? ' (open it with its token: ?token=…)' : '')
  }

  async stop() {
    await Promise.all([...this.views].map((view) => view.close()))
  }

  /** one section, narrowed by name; `caller` is the agent name that tools, calls and agent default to */
  select(what: What, name?: string, caller?: string): Selection {
    return select(this.records.report(), what, name, caller)
  }
}

namespace Inspector {
  export interface Config {
    /** recent calls kept per agent (and for the global layer) */
    maxCalls: number
    /** the longest text cordis_inspect returns to the model */
    maxChars: number
    /** recently disposed plugin loads remembered */
    maxDisposed: number
    /** register the cordis_inspect tool */
    tool: boolean
    /** serve the live web view with the inspector */
    web?: { listen?: string | number; token?: string }
    /** for tests: the clock durations and timestamps come from */
    clock?: Clock
  }

  /** what a deployer writes: every key optional */
  export type ConfigInput = Partial<Config>

  export const Config = defineConfig<Config, ConfigInput>()(
    Schema.object({
      maxCalls: Schema.natural().min(1).default(50).description('recent calls kept per agent (and for the global layer)'),
      maxChars: Schema.natural().min(200).default(4000).description('the longest text cordis_inspect returns to the model'),
      maxDisposed: Schema.natural().min(0).default(20).description('recently disposed plugin loads remembered'),
      tool: Schema.boolean().default(true).description('register the cordis_inspect tool'),
      web: Schema.object({
        listen: Schema.union([Schema.natural().max(65535), Schema.string().pattern(LISTEN)]).description(
          '[host:]port to serve the live web view on (host 127.0.0.1 unless given; port 0 picks a free one)',
        ),
        token: Schema.string()
          .pattern(/^[\w-]{16,}$/)
          .description('the token the view requires in its URL (16+ letters, digits, - or _); default: none on a loopback host, a random one elsewhere'),
      }).description('the live web view, served while the inspector runs'),
      clock: Schema.any().hidden(),
    }),
  )
}

export default Inspector
export { Inspector }
