// the inspector service (`ctx.inspector`): records the call trace and disposals, builds the report on
// demand, and registers the `cordis_inspect` tool. it observes only: its pre-execute listener abstains.

import { agentOf, defineTool, type Json, t } from '@faber/core'
import { type Context, Schema, Service } from 'cordis'
import { onDisposed, pluginOf } from './cordis-adapter.ts'
import { capText, SECTIONS, type Selection, select, type What } from './render.ts'
import { buildReport, type DisposedPluginReport, type Report } from './report.ts'
import { CallTrace, type Clock } from './trace.ts'

declare module 'cordis' {
  interface Context {
    inspector: Inspector
  }
}

export const INSPECT_TOOL = 'cordis_inspect'

class Inspector extends Service {
  static inject = ['tools']

  declare ctx: Context
  private trace: CallTrace
  private disposed: DisposedPluginReport[] = []

  constructor(
    ctx: Context,
    public config: Inspector.Config,
  ) {
    super(ctx, 'inspector', true)
    this.config = Inspector.Config(config ?? {})
    this.trace = new CallTrace(this.config.maxCalls, this.config.clock)

    // prepended so that it runs before any deciding listener and sees every call that reaches policy; abstains
    ctx.on(
      'tools/pre-execute',
      (exec) => {
        this.trace.enter(exec)
      },
      { prepend: true },
    )
    ctx.on('tools/result', (exec, result) => this.trace.record(exec, result))
    onDisposed(ctx, ({ name, context }) => {
      const entry: DisposedPluginReport = { name, loadedBy: pluginOf(context), at: new Date(this.config.clock?.wall() ?? Date.now()).toISOString() }
      const agent = agentOf(context)
      if (agent) entry.agent = agent.name
      this.disposed.push(entry)
      if (this.disposed.length > this.config.maxDisposed) this.disposed.shift()
    })

    if (this.config.tool) {
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
            const selection = this.select(args.what, args.name, run.exec.agent?.name)
            return { what: selection.what, text: capText(selection.text, this.config.maxChars), data: JSON.parse(JSON.stringify(selection.data)) as Json }
          },
          isConcurrencySafe: () => true,
          annotations: { readOnly: true },
        }),
      )
    }
  }

  /** the whole report, JSON-serializable */
  report(): Report {
    const live = new Set(this.ctx.root.tools.agents())
    return buildReport(this.ctx, { calls: this.trace.all((agent) => live.has(agent)), disposed: [...this.disposed] })
  }

  /** one section, narrowed by name; `caller` is the agent name that tools, calls and agent default to */
  select(what: What, name?: string, caller?: string): Selection {
    return select(this.report(), what, name, caller)
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
    /** for tests: the clock durations and timestamps come from */
    clock?: Clock
  }

  export const Config: Schema<Partial<Config>, Config> = Schema.object({
    maxCalls: Schema.natural().min(1).default(50).description('recent calls kept per agent (and for the global layer)'),
    maxChars: Schema.natural().min(200).default(4000).description('the longest text cordis_inspect returns to the model'),
    maxDisposed: Schema.natural().min(0).default(20).description('recently disposed plugin loads remembered'),
    tool: Schema.boolean().default(true).description('register the cordis_inspect tool'),
    clock: Schema.any().hidden(),
  }) as Schema<Partial<Config>, Config>
}

export default Inspector
export { Inspector }
