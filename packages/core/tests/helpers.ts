// test helpers: a started deployment, plugin errors rethrown, and a CodeRuntime that replays a script of binding calls
// through the real run_code bridge (so core tests need no sandbox package).

import ToolRuntime, { type BridgeReply, type CodeRunOutcome, type CodeRunRequest, type CodeRuntime, defineTool, type Mode, t } from '@faber/core'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0

export async function deployment(config: { mode?: Mode; maxParallelSubCalls?: number; typecheck?: boolean } = {}) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, config)
  await ctx.start()
  return ctx
}

export const signal = () => new AbortController().signal

let calls = 0
export const callId = () => `call-${++calls}`

export type Step = { name: string; args: unknown } | ((request: CodeRunRequest) => Promise<unknown>)

/** a CodeRuntime whose "program" is a list of binding calls made in order; replies are recorded */
export class ScriptedCodeRuntime implements CodeRuntime {
  readonly backend = 'scripted'
  replies: BridgeReply[] = []
  requests: CodeRunRequest[] = []

  constructor(public script: (request: CodeRunRequest) => Promise<unknown> | unknown) {}

  async run(request: CodeRunRequest): Promise<CodeRunOutcome> {
    this.requests.push(request)
    try {
      const result = await this.script(request)
      return result === undefined ? { ok: true, logs: [] } : { ok: true, logs: [], result: JSON.stringify(result) }
    } catch (error) {
      return { ok: false, kind: 'exception', message: String(error), logs: [] }
    }
  }
}

const mounted = new WeakMap<Context, ScriptedCodeRuntime>()

/** mounts (once per context) a scripted code runtime whose next programs make these binding calls in order */
export function mountCalls(ctx: Context, calls: { name: string; args: unknown }[]) {
  let runtime = mounted.get(ctx)
  if (!runtime) {
    runtime = new ScriptedCodeRuntime(() => undefined)
    mounted.set(ctx, runtime)
    ctx.set('codeRuntime', runtime)
  }
  const target = runtime
  target.script = async (request) => {
    const replies: BridgeReply[] = []
    for (const { name, args } of calls) replies.push(await request.call(name, JSON.stringify(args)))
    target.replies.push(...replies)
    return replies
  }
  return target
}

export function echoTool(name = 'echo', onRun?: () => void) {
  return defineTool({
    name,
    description: `echoes its text (${name})`,
    parameters: t.object({ text: t.string() }),
    output: { schema: t.object({ echoed: t.string() }), render: (_, v) => v.echoed },
    execute: ({ text }) => {
      onRun?.()
      return { echoed: text }
    },
  })
}
