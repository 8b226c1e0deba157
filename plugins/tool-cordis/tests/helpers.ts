// test helpers: a deployment with plugin errors surfaced, small tools, and a CodeRuntime whose "program" makes
// scripted binding calls, in a fixed order, through the core's real run_code bridge (one test also runs a real
// program in @faber/sandbox)

import ToolRuntime, { assertStarted, type BridgeReply, type CodeRunOutcome, type CodeRunRequest, type CodeRuntime, defineTool, type Mode, t } from '@faber/core'
import { Context, Logger } from 'cordis'
import Inspector from '../src/index.ts'

Logger.levels.base = 0

export async function deployment(options: { mode?: Mode; inspector?: Partial<Inspector.Config> | false } = {}) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: options.mode ?? 'native' })
  if (options.inspector !== false) ctx.plugin(Inspector, options.inspector ?? {})
  await ctx.start()
  await assertStarted(ctx)
  return ctx
}

export const signal = () => new AbortController().signal

export function echoTool(name = 'echo') {
  return defineTool({
    name,
    description: `echoes its text (${name})`,
    parameters: t.object({ text: t.string() }),
    output: { schema: t.object({ echoed: t.string() }), render: (_, v) => v.echoed },
    execute: ({ text }) => ({ echoed: text }),
    isConcurrencySafe: () => true,
  })
}

export function failingTool(name = 'explode') {
  return defineTool({
    name,
    description: 'always fails',
    parameters: t.object({}),
    output: { schema: t.object({}) },
    execute: () => {
      throw Object.assign(new Error('kaboom'), { code: 'E_BOOM' })
    },
  })
}

/** a CodeRuntime whose program makes these binding calls in order and returns the replies */
export class ScriptedCodeRuntime implements CodeRuntime {
  readonly backend = 'scripted'

  constructor(public calls: { name: string; args: unknown }[]) {}

  async run(request: CodeRunRequest): Promise<CodeRunOutcome> {
    const replies: BridgeReply[] = []
    for (const { name, args } of this.calls) replies.push(await request.call(name, JSON.stringify(args)))
    return { ok: true, logs: [], result: JSON.stringify(replies) }
  }
}
