// the rules answerer: answers from the configured rules and the remembered grants, and delegates whatever they do
// not cover. the approval service loads it, ahead of every other answerer, handing it its matcher directly: reaching
// a service through a cordis context costs tens of microseconds per access, too much for every call.

import type { Context } from 'cordis'
import type { ApprovalQuery } from './index.ts'

export const name = 'approval-rules'

export interface Config {
  match(query: ApprovalQuery): Promise<{ decision: 'allow' | 'reject'; by: string } | undefined>
}

export function apply(ctx: Context, config: Config) {
  const { match } = config
  ctx.on(
    'approval/request',
    async (query) => {
      const verdict = await match(query)
      if (verdict) return { decision: verdict.decision, note: `decided by ${verdict.by}` }
    },
    { prepend: true },
  )
}
