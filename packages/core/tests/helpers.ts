// test helpers beyond @faber/core/testing (deployments, calls, small tools): a CodeRuntime that replays a script of
// binding calls through the real run_code bridge, so core tests need no sandbox package. importing it quiets logs.

import type { BridgeReply, CodeRunOutcome, CodeRunRequest, CodeRuntime } from '@faber/core'
import { type Context, Logger } from 'cordis'

Logger.levels.base = 0

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
