// the web answerer: holds each request it is asked until someone answers it from the inspector's web view (a POST
// that passed the view's token and origin checks), the request is cancelled, or its deadline passes. it is an
// ordinary answerer, so the service audits its answers like any other (`approval/decided` with answeredBy
// `approval-web`). the view finds it as the `approvalWeb` service.

import { defineConfig, messageOf, waitOnPerson } from '@faber/core'
import { type Context, Schema, Service } from 'cordis'
import type { GrantScope } from './grants.ts'
import type { Approval, ApprovalAnswer, ApprovalQuery } from './index.ts'
import type { PendingQuestion } from './pending.ts'

declare module 'cordis' {
  interface Context {
    approvalWeb: WebAnswerer
  }
}

export const WEB_ANSWERER = 'approval-web'

/** what the view may answer: allow or reject, once or remembered */
export interface WebAnswer {
  decision: 'allow' | 'reject'
  remember?: GrantScope
  /** who answered, for the audit note (e.g. the browser's address) */
  from?: string
}

export type WebAnswererChange = { kind: 'waiting'; query: ApprovalQuery } | { kind: 'settled'; id: string }

interface Held {
  query: ApprovalQuery
  settle(answer: ApprovalAnswer | undefined): void
}

class WebAnswerer extends Service {
  static name = 'approvalWeb'
  static inject = ['approval']
  /** it holds questions for the inspector's view and listens on nothing itself */
  static replay = 'inert' as const
  declare ctx: Context
  private held = new Map<string, Held>()
  private watchers = new Set<(change: WebAnswererChange) => void>()

  constructor(
    ctx: Context,
    public config: WebAnswerer.Config,
  ) {
    super(ctx, 'approvalWeb', true)
    this.config = WebAnswerer.Config(config ?? {})
    // the listener lives in a plugin of its own so that the audit names the answerer approval-web
    ctx.plugin({ name: WEB_ANSWERER, apply: (child: Context) => child.on('approval/request', (query) => this.hold(query)) })
  }

  private hold(query: ApprovalQuery): Promise<ApprovalAnswer | undefined> {
    if (query.signal.aborted) return Promise.resolve(undefined)
    // a person answers here: the program that made the call stops its wall clock meanwhile
    const answered = waitOnPerson(query.exec)
    return new Promise((resolve) => {
      const settle = (answer: ApprovalAnswer | undefined) => {
        if (!this.held.delete(query.id)) return
        answered()
        query.signal.removeEventListener('abort', onAbort)
        this.tell({ kind: 'settled', id: query.id })
        resolve(answer)
      }
      const onAbort = () => settle(undefined)
      query.signal.addEventListener('abort', onAbort, { once: true })
      this.held.set(query.id, { query, settle })
      this.tell({ kind: 'waiting', query })
    })
  }

  private tell(change: WebAnswererChange) {
    for (const watcher of this.watchers) {
      try {
        watcher(change)
      } catch (error) {
        this.ctx.logger('approval').warn('a web answerer watcher threw (ignored): %s', messageOf(error))
      }
    }
  }

  /** the requests waiting for an answer from the web, oldest first */
  pending(): ApprovalQuery[] {
    return [...this.held.values()].map((held) => held.query)
  }

  /** answers a waiting request; false when it is not waiting (answered, cancelled or timed out already) */
  answer(id: string, answer: WebAnswer): boolean {
    if (answer?.decision !== 'allow' && answer?.decision !== 'reject') throw new TypeError('approvalWeb.answer: decision must be "allow" or "reject"')
    const remember = answer.remember ?? 'once'
    if (remember !== 'once' && !this.config.remember.includes(remember)) {
      throw new TypeError(`approvalWeb.answer: remember "${remember}" is not offered (config.remember: ${this.config.remember.join(', ') || 'none'})`)
    }
    const held = this.held.get(id)
    if (!held) return false
    const note = `answered on the web view${answer.from ? ` from ${answer.from}` : ''}`
    held.settle(remember === 'once' ? { decision: answer.decision, note } : { decision: answer.decision, remember, note })
    return true
  }

  /**
   * the questions other processes sharing the deployment's store left waiting for a person (a `faber run` asking at a
   * terminal nobody watches, one stopped while it asked): the view lists them beside its own requests
   */
  questions(): Promise<PendingQuestion[]> {
    return this.service().pending({ elsewhere: true })
  }

  /** answers one of `questions()` in the store; false when it waits no more (answered elsewhere, expired) */
  answerQuestion(id: string, answer: Pick<WebAnswer, 'decision' | 'from'>): Promise<boolean> {
    if (answer?.decision !== 'allow' && answer?.decision !== 'reject') throw new TypeError('approvalWeb.answerQuestion: decision must be "allow" or "reject"')
    return this.service().answer(id, answer.decision, `the web view${answer.from ? ` from ${answer.from}` : ''}`)
  }

  private service() {
    return this.ctx.get('approval') as unknown as Approval
  }

  /** calls back when a request starts or stops waiting here; returns the disposer */
  watch(watcher: (change: WebAnswererChange) => void): () => void {
    this.watchers.add(watcher)
    return () => this.watchers.delete(watcher)
  }
}

namespace WebAnswerer {
  export interface Config {
    /** the remembered answers the page offers besides once */
    remember: ('session' | 'always')[]
  }

  /** what a deployer writes: every key optional */
  export type ConfigInput = Partial<Config>

  export const Config = defineConfig<Config, ConfigInput>()(
    Schema.object({
      remember: Schema.array(Schema.union(['session', 'always'] as const))
        .default(['session'])
        .description('remembered answers the page offers besides "once" (always needs @faber/store)'),
    }),
  )
}

export default WebAnswerer
export { WebAnswerer }
