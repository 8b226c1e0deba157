// test helpers beyond @faber/core/testing: a deployment with the inspector, and a CodeRuntime whose "program" makes
// scripted binding calls, in a fixed order, through the core's real run_code bridge (one test also runs a real
// program in @faber/sandbox)

import type { BridgeReply, CodeRunOutcome, CodeRunRequest, CodeRuntime, Mode } from '@faber/core'
import * as kit from '@faber/core/testing'
import { Logger } from 'cordis'
import Inspector from '../src/index.ts'

Logger.levels.base = 0

/** a started deployment with the inspector loaded (unless `inspector: false`) */
export function deployment(options: { mode?: Mode; inspector?: Partial<Inspector.Config> | false } = {}) {
  return kit.deployment({ mode: options.mode ?? 'native' }, (ctx) => {
    if (options.inspector !== false) ctx.plugin(Inspector, options.inspector ?? {})
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
