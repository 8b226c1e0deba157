// the rules answerer: answers from the configured rules and the remembered grants (ctx.approval.match), and
// delegates whatever they do not cover. the approval service loads it, ahead of every other answerer.

import type { Context } from 'cordis'

export const name = 'approval-rules'
export const inject = ['approval']

export function apply(ctx: Context) {
  ctx.on(
    'approval/request',
    (query) => {
      const verdict = (ctx.approval as { match?: (q: typeof query) => { decision: 'allow' | 'reject'; by: string } | undefined }).match?.(query)
      if (verdict) return { decision: verdict.decision, note: `decided by ${verdict.by}` }
    },
    { prepend: true },
  )
}
