// the approval service's workings, kept in a plain object: the service delegates to it, and the hot path (the
// pre-execute listener, the rules answerer, request) never goes through a cordis context, where reaching a service
// costs tens of microseconds per access.

import {
  type Agent,
  type ApprovalOutcome,
  type ApprovalRequest,
  type Execution,
  type ExecutionToken,
  emitEach,
  firstAnswer,
  formatDuration,
  type Json,
  type Listener,
  messageOf,
  nearestKey,
  TIMED_OUT,
  type ToolResult,
  withDeadline,
} from '@faber/core'
import type { Store } from '@faber/store'
import type { Events, Logger } from 'cordis'
import { exactCommandPattern } from './commands.ts'
import { compileMatcher, type Decision, type Grant, type GrantInput, type GrantScope, GrantStore, type Matcher, newGrant } from './grants.ts'
import type { ApprovalAnswer, ApprovalQuery } from './index.ts'
import { type PendingQuestion, PendingQuestions } from './pending.ts'
import { name as RULES_ANSWERER } from './rules.ts'

/** who answered a request whose question was answered in the store (`faber grants answer`, another process) */
export const STORE_ANSWERER = 'approval-store'

interface Config {
  policy: 'ask' | 'never' | 'auto'
  require: string[]
  except: string[]
  rules: { name?: string; tool: string; arguments?: Record<string, string>; command?: string; agent?: string; decision: Decision }[]
  timeoutMs: number
  answerers: Record<string, { timeoutMs?: number }>
  grantWatchMs: number
}

/** the listeners on an event that hear an agent's calls (core's listenersFor, bound to the deployment) */
export type ListenersFor = (event: string, agent: Agent | undefined) => readonly Listener[]

function nameMatcher(patterns: readonly string[]) {
  const compiled = patterns.map((pattern) => compileMatcher({ tool: pattern }))
  return (name: string) => compiled.some((matches) => matches(name, undefined, null))
}

const SCOPES: readonly unknown[] = ['once', 'session', 'always']

/**
 * what a remembered answer to a shell tool covers when the answerer did not narrow it: this command only, never the
 * tool as a whole (a grant for "git status" must not let "rm -rf ." through). a command that is not simple is
 * remembered as this exact text.
 */
function commandGrant(args: Json): Pick<GrantInput, 'command' | 'arguments'> {
  const command = (args as { command?: unknown } | null)?.command
  if (typeof command !== 'string') return { arguments: { '$.command': '^(?!)' } }
  const pattern = exactCommandPattern(command)
  if (pattern !== undefined) return { command: pattern }
  return { arguments: { '$.command': `^${command.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$` } }
}

/** why an answer is not one, or undefined */
function malformed(answer: unknown): string | undefined {
  if (typeof answer !== 'object') return `it answered ${JSON.stringify(answer)}, not { decision }`
  const { decision, remember, grant, note } = answer as ApprovalAnswer
  if (note !== undefined && typeof note !== 'string') return 'its note is not a string'
  if (decision !== 'allow' && decision !== 'reject') return `its decision ${JSON.stringify(decision)} is neither "allow" nor "reject"`
  if (remember !== undefined && !SCOPES.includes(remember)) return `its remember ${JSON.stringify(remember)} is not once, session or always`
  if (grant !== undefined) {
    try {
      compileMatcher({ tool: grant.tool ?? 'x', arguments: grant.arguments, command: grant.command, decision })
    } catch (error) {
      return `its grant is invalid (${messageOf(error)})`
    }
  }
}

interface Rule {
  name: string
  matches: Matcher
  decision: Decision
}

/** the answerer being asked, and whether the chain has answered */
interface Asking {
  plugin: string
  answered: boolean
}

interface Verdict {
  outcome: ApprovalOutcome
  answeredBy: string
  remember?: GrantScope
  grant?: string
  note?: string
  /** an allowed request's question in the store, which keeps the answer until the body's result (not audited) */
  question?: string
}

export class Broker {
  private sequence = 0
  /** the calls allowed and not yet finished, by execution token: their end is audited as approval/settled */
  private allowed = new Map<ExecutionToken, string>()
  /** of those, the ones whose question in the store keeps their answer until then, by execution token */
  private kept = new Map<ExecutionToken, string>()
  private rules: Rule[]
  readonly requires: (name: string) => boolean
  private memory: { grant: Grant; matches: Matcher }[] = []
  private persisted: { grant: Grant; matches: Matcher }[] = []
  private saved?: GrantStore
  /** the questions waiting for a person, in the same store */
  private questions?: PendingQuestions
  /** the store's change mark when `persisted` was read: another process's or host's commit moves it */
  private seen?: number
  /** the read under way, and the mark it was started at: checks at the same mark share it */
  private loading?: { mark: number; done: Promise<void> }

  /** the sessions with a log now running, by agent: a call of the only one of its agent is that session's */
  private sessions = new Map<Agent | undefined, Set<string>>()

  /** the names in `answerers` that named a loaded plugin, or were warned about: each is checked once */
  private checkedAnswerers = new Set<string>()

  constructor(
    private config: Config,
    private listeners: ListenersFor,
    private logger: Logger,
    /** the names of the plugins loaded in the deployment */
    private pluginNames: () => Iterable<string> = () => [],
  ) {
    this.rules = config.rules.map((rule, index) => {
      const name = rule.name || `rules[${index}]`
      try {
        return { name, matches: compileMatcher(rule), decision: rule.decision }
      } catch (error) {
        throw new TypeError(`approval: rule "${name}": ${messageOf(error)}`)
      }
    })
    const required = nameMatcher(config.require)
    const except = nameMatcher(config.except)
    this.requires = (name) => required(name) && !except(name)
  }

  /** keeps always grants in this store from now on (the deployment's ctx.store); undefined: none can be kept */
  /** keeps `always` grants in `store` from now on; the promise settles once its tables are ready (rejects, naming it, when they cannot be) */
  useStore(store: Store | undefined): Promise<void> | undefined {
    if (store === this.saved?.store) return
    const saved = store && new GrantStore(store)
    this.saved = saved
    this.questions = saved && new PendingQuestions(saved.store, () => saved.ready())
    this.persisted = []
    this.seen = undefined
    // migrated now, not at the first call: a failure here is said at once, and every read waits for it anyway
    return this.saved?.ready().catch((error) => {
      throw new Error(`the grants kept in ${store?.path} cannot be used: ${messageOf(error)}`)
    })
  }

  /** true when `always` grants can be kept */
  get persistent() {
    return this.saved?.store.open === true
  }

  /**
   * the persisted grants as of now: read again only when another connection committed since the last read, or when
   * the store cannot tell (PostgreSQL's listening connection is down). a read that fails rejects, naming the store:
   * a grant that cannot be read never allows a call
   */
  private async current() {
    const saved = this.saved
    if (!saved?.store.open) return []
    const mark = saved.store.changeMark('approval_grants')
    if (mark !== undefined && mark === this.seen) return this.persisted
    if (mark !== undefined && this.loading?.mark === mark) {
      await this.loading.done
      return this.persisted
    }
    const done = this.reload(saved, mark)
    if (mark !== undefined) this.loading = { mark, done }
    try {
      await done
    } finally {
      if (this.loading?.done === done) this.loading = undefined
    }
    return this.persisted
  }

  private async reload(saved: GrantStore, mark: number | undefined) {
    let rows: Awaited<ReturnType<GrantStore['read']>>
    try {
      rows = await saved.read()
    } catch (error) {
      throw new Error(`the grants kept in the store cannot be read, so this call is denied until it can (${messageOf(error)})`, { cause: error })
    }
    const persisted: { grant: Grant; matches: Matcher }[] = []
    const unreadable: string[] = []
    for (const row of rows) {
      if ('grant' in row) {
        persisted.push(row)
        continue
      }
      // a row another writer left that is not a grant: an allow grant is ignored, a reject grant (or one whose decision
      // cannot be read) denies every call, since what it was meant to refuse is unknown; said once per change
      const { id, decision, problem } = row.unreadable
      const rejects = decision !== 'allow'
      unreadable.push(`"${id}" (${problem}): ${rejects ? 'every call is rejected until it is fixed or revoked' : 'ignored'}`)
      if (rejects) {
        const grant = Object.freeze({ id, tool: '*', decision: 'reject', scope: 'always', createdAt: '', by: 'unreadable' }) satisfies Grant
        persisted.push({ grant, matches: () => true })
      }
    }
    if (unreadable.length && mark !== this.seen) {
      this.logger.warn('the store %s holds grants that cannot be read: %s (faber grants revoke <id>)', saved.store.path, unreadable.join('; '))
    }
    if (this.saved !== saved) return
    this.persisted = persisted
    this.seen = mark
  }

  /** every remembered grant: once and session ones in memory, always ones from the store */
  async grants(): Promise<Grant[]> {
    const persisted = await this.current()
    return [...this.memory, ...persisted].map((entry) => entry.grant)
  }

  /** records a grant; an `always` grant is committed to the store before this resolves, and fails without one */
  async grant(input: GrantInput, by = 'api'): Promise<Grant> {
    if (!SCOPES.includes(input?.scope)) throw new TypeError('approval.grant: scope must be "once", "session" or "always"')
    if (input.decision !== undefined && input.decision !== 'allow' && input.decision !== 'reject') {
      throw new TypeError('approval.grant: decision must be "allow" or "reject"')
    }
    if (input.session !== undefined && (typeof input.session !== 'string' || input.scope === 'always')) {
      throw new TypeError('approval.grant: session must be a string, and an "always" grant outlives every session: leave session out')
    }
    const matches = compileMatcher(input)
    const grant = newGrant(input, by)
    if (input.scope !== 'always') {
      this.memory.push({ grant, matches })
      this.recorded()
      return grant
    }
    const saved = this.saved
    if (!saved?.store.open) throw new TypeError('approval.grant: "always" grants need a store; load @faber/store (its path is where they are kept)')
    await saved.add(grant)
    // SQLite: our own commit leaves data_version as it was, so add it to what was read; another's commit (and, on
    // PostgreSQL, this one's notification) still triggers a reload
    if (this.saved === saved && !this.persisted.some((entry) => entry.grant.id === grant.id)) this.persisted = [...this.persisted, { grant, matches }]
    this.recorded()
    return grant
  }

  // the requests waiting for an answer look again at once when this process records a grant
  private waitingForGrants = new Set<() => void>()
  private recorded() {
    for (const look of [...this.waitingForGrants]) look()
  }

  /**
   * a grant recorded while a request waits answers it, as the rules answerer would have had it been there when asked:
   * one recorded in this process at once, one another process committed to the store (its always answer, `faber grants
   * import`) once seen, the store's change mark read every grantWatchMs
   */
  private grantRecorded(query: ApprovalQuery, asking: Asking): { verdict: Promise<Verdict>; stop(): void } {
    let timer: ReturnType<typeof setTimeout> | undefined
    let stopped = false
    let mark = this.saved?.store.changeMark('approval_grants')
    let found!: (verdict: Verdict) => void
    const verdict = new Promise<Verdict>((resolve) => (found = resolve))
    const stop = () => {
      stopped = true
      clearTimeout(timer)
      this.waitingForGrants.delete(look)
    }
    // (not once an answerer answered: the grant its answer records is its own)
    const look = async () => {
      if (stopped || asking.answered) return
      let hit: Awaited<ReturnType<Broker['match']>>
      try {
        hit = await this.match(query)
      } catch {
        // a store that cannot be read answers nothing here; the answerers still may
        return
      }
      if (stopped || asking.answered || !hit) return
      stop()
      const outcome = hit.decision === 'allow' ? 'allowed' : 'rejected'
      found({ outcome, answeredBy: RULES_ANSWERER, note: `decided by ${hit.by}, recorded while the request waited` })
    }
    const poll = () => {
      timer = setTimeout(() => {
        const now = this.saved?.store.changeMark('approval_grants')
        if (now === undefined || now !== mark) {
          mark = now
          void look()
        }
        if (!stopped) poll()
      }, this.config.grantWatchMs)
      // the request's own deadline keeps the process up, not this
      timer.unref()
    }
    this.waitingForGrants.add(look)
    poll()
    return { verdict, stop }
  }

  /** removes a grant by id; true when there was one */
  async revoke(id: string): Promise<boolean> {
    const index = this.memory.findIndex((entry) => entry.grant.id === id)
    if (index >= 0) {
      this.memory.splice(index, 1)
      return true
    }
    const saved = this.saved
    if (!saved?.store.open || !(await saved.remove(id))) return false
    this.persisted = this.persisted.filter((entry) => entry.grant.id !== id)
    return true
  }

  /**
   * what the configured rules and the remembered grants say about a request: reject wins over allow, and a once grant
   * is used up only when nothing longer-lived allows the call. the rules answerer answers with it.
   */
  async match(
    query: Pick<ApprovalRequest, 'tool' | 'agent' | 'arguments'> & { exec?: { session?: string } },
  ): Promise<{ decision: Decision; by: string } | undefined> {
    const agent = query.agent?.name
    const session = query.exec?.session
    const persisted = await this.current()
    const hits: { decision: Decision; by: string; grant?: Grant }[] = [
      ...this.rules.filter((rule) => rule.matches(query.tool, agent, query.arguments)).map((rule) => ({ decision: rule.decision, by: `rule ${rule.name}` })),
      ...[...persisted, ...this.memory]
        .filter((entry) => (entry.grant.session === undefined || entry.grant.session === session) && entry.matches(query.tool, agent, query.arguments))
        .map((entry) => ({ decision: entry.grant.decision, by: `grant ${entry.grant.id}`, grant: entry.grant })),
    ]
    const reject = hits.find((hit) => hit.decision === 'reject')
    if (reject?.grant?.scope === 'once') this.memory = this.memory.filter((entry) => entry.grant !== reject.grant)
    if (reject) return { decision: 'reject', by: reject.by }
    const allow = hits.find((hit) => hit.grant?.scope !== 'once') ?? hits[0]
    if (!allow) return
    if (allow.grant?.scope === 'once') this.memory = this.memory.filter((entry) => entry.grant !== allow.grant)
    return { decision: 'allow', by: allow.by }
  }

  /** a session with a log started or continued (agent/session): its calls' questions can be taken after a restart */
  sessionStarted(agent: Agent | undefined, id: string) {
    let ids = this.sessions.get(agent)
    if (!ids) this.sessions.set(agent, (ids = new Set()))
    ids.add(id)
  }

  sessionEnded(agent: Agent | undefined, id: string) {
    const ids = this.sessions.get(agent)
    ids?.delete(id)
    if (ids?.size === 0) this.sessions.delete(agent)
  }

  /**
   * the conversation a call belongs to: its exec.session (an MCP session), or the session log its agent runs in. none
   * when unknown (no log, or several sessions of one agent at once): its question is then never taken after a restart
   */
  private conversationOf(query: ApprovalQuery): string | undefined {
    if (query.exec?.session !== undefined) return query.exec.session
    const ids = this.sessions.get(query.agent)
    return ids?.size === 1 ? ids.values().next().value : undefined
  }

  /** a conversation ended: the grants made in it go with it */
  endSession(session: string) {
    this.memory = this.memory.filter((entry) => entry.grant.session !== session)
  }

  async request(request: ApprovalRequest): Promise<ApprovalOutcome> {
    if (typeof request !== 'object' || request === null || typeof request.tool !== 'string' || !(request.signal instanceof AbortSignal)) {
      throw new TypeError('approval.request: pass { tool, arguments, callId, reason, signal, agent?, program?, exec? }')
    }
    const started = performance.now()
    // answerers see a signal that also aborts when the request runs out of time, so they stop asking
    const expire = new AbortController()
    const query: ApprovalQuery = Object.freeze({
      ...request,
      signal: AbortSignal.any([request.signal, expire.signal]),
      id: `approval-${++this.sequence}`,
      nested: request.exec?.parent !== undefined,
    })
    this.audit('approval/asked', query.agent, {
      id: query.id,
      agent: query.agent,
      tool: query.tool,
      arguments: query.arguments,
      callId: query.callId,
      reason: query.reason,
      program: query.program,
      nested: query.nested,
    })
    const { question, ...verdict } = await this.decide(query, request.signal)
    // answerers still asking are told to stop: at the deadline, or once a grant recorded meanwhile answered
    if (verdict.outcome === 'timed-out' || verdict.answeredBy === RULES_ANSWERER || verdict.answeredBy === STORE_ANSWERER) expire.abort(new Error(verdict.note))
    if (verdict.outcome === 'allowed' && request.exec) {
      this.allowed.set(request.exec.token, query.id)
      if (question) this.kept.set(request.exec.token, question)
    } else if (question) this.forget(question)
    this.audit('approval/decided', query.agent, {
      id: query.id,
      agent: query.agent,
      tool: query.tool,
      callId: query.callId,
      ...verdict,
      durationMs: performance.now() - started,
    })
    return verdict.outcome
  }

  private async decide(query: ApprovalQuery, caller: AbortSignal): Promise<Verdict> {
    if (caller.aborted) return { outcome: 'cancelled', answeredBy: 'caller' }
    const { policy } = this.config
    if (policy === 'never') return { outcome: 'rejected', answeredBy: 'policy', note: 'the approval policy is never' }
    if (policy === 'auto' && query.exec?.tool.annotations.readOnly === true) {
      return { outcome: 'allowed', answeredBy: 'policy', note: `the approval policy is auto and "${query.tool}" is read-only` }
    }
    let onAbort!: () => void
    const aborted = new Promise<Verdict>((resolve) => {
      onAbort = () => resolve({ outcome: 'cancelled', answeredBy: 'caller' })
      caller.addEventListener('abort', onAbort, { once: true })
    })
    const asking: Asking = { plugin: 'none', answered: false }
    const limit = this.config.timeoutMs
    // a program run again after a restart: its call may have been answered in the store while no process asked it
    const found = query.nested ? await this.leftBehind(query) : undefined
    // taken over by one process only: two running the same program again must not both act on its answer
    const left = found && (await this.claim(found)) ? found : undefined
    if (left?.decision) {
      caller.removeEventListener('abort', onAbort)
      const outcome = left.decision === 'allow' ? 'allowed' : 'rejected'
      const note = `answered by ${left.answeredBy ?? 'someone'} in the store (question ${left.id}) before the process that asked it stopped, or since`
      return { outcome, answeredBy: STORE_ANSWERER, note, question: left.id }
    }
    const recorded = this.grantRecorded(query, asking)
    // a question left unanswered for this call is this request's: answered there, it answers it
    const question = this.questioned(query, asking, left?.id)
    const answer = withDeadline(Promise.race([aborted, this.ask(query, asking), recorded.verdict, question.verdict]), limit)
    try {
      // a late answer loses the race and is discarded: nothing it asked to remember is recorded
      const verdict = await answer
      if (verdict === TIMED_OUT) {
        return { outcome: 'timed-out', answeredBy: asking.plugin, note: `no answer came within ${formatDuration(limit)} (the approval deadline)` }
      }
      if (verdict.outcome !== 'allowed') return verdict
      // an allow is kept in the request's question, when it has one, before the body may run: a process stopped before
      // the body started finds it when the program runs again
      const kept = await question.keep(verdict.answeredBy)
      return kept ? { ...verdict, question: kept } : verdict
    } finally {
      recorded.stop()
      question.stop()
      caller.removeEventListener('abort', onAbort)
    }
  }

  /** the question a process that stopped left in the store for this call (the program that asked it runs again) */
  private async leftBehind(query: ApprovalQuery): Promise<PendingQuestion | undefined> {
    const questions = this.questions
    const root = query.exec?.rootCallId
    if (!questions?.store.open || root === undefined) return
    try {
      return await questions.leftBehind(this.conversationOf(query), root, query.tool, query.agent?.name, query.arguments)
    } catch (error) {
      this.logger.warn('the questions kept in the store cannot be read (the request is asked as usual): %s', messageOf(error))
    }
  }

  /** takes a left-behind question over; another process may have taken it first (then it is asked as usual) */
  private async claim(question: PendingQuestion): Promise<boolean> {
    try {
      return (await this.questions?.claim(question.id, this.deadline())) === true
    } catch (error) {
      this.logger.warn('a question kept in the store cannot be taken over (the request is asked as usual): %s', messageOf(error))
      return false
    }
  }

  /** a question in the store lives as long as a request asked now may wait for it */
  private deadline() {
    return new Date(Date.now() + this.config.timeoutMs).toISOString()
  }

  private forget(id: string) {
    this.questions?.remove(id).catch((error) => this.logger.warn('a decided question stays in the store: %s', messageOf(error)))
  }

  /**
   * a request still waiting after grantWatchMs is written to the store as a question (pending.ts), so another process
   * can see it and answer it; its answer there answers the request, read once the table changed, every grantWatchMs.
   * it leaves the store when the request is decided; allowed, it keeps the answer (`keep`) until the body's result is in
   */
  private questioned(
    query: ApprovalQuery,
    asking: Asking,
    adopted?: string,
  ): { verdict: Promise<Verdict>; keep(answeredBy: string): Promise<string | undefined>; stop(): void } {
    const questions = this.questions
    let found!: (verdict: Verdict) => void
    const verdict = new Promise<Verdict>((resolve) => (found = resolve))
    if (!questions?.store.open) return { verdict, keep: async () => undefined, stop: () => {} }
    let stopped = false
    let kept = false
    let id: string | undefined
    let writing: Promise<string> | undefined
    let mark: number | undefined
    let timer: ReturnType<typeof setTimeout> | undefined
    const every = this.config.grantWatchMs
    const later = (fn: () => Promise<void>) => {
      timer = setTimeout(() => void fn().catch((error) => this.logger.warn('a question kept in the store: %s', messageOf(error))), every)
      // the request's own deadline keeps the process up, not this
      timer.unref()
    }
    const write = async () => {
      if (stopped || asking.answered) return
      mark = questions.mark()
      writing = questions.ask({
        session: this.conversationOf(query),
        expiresAt: this.deadline(),
        rootCallId: query.exec?.rootCallId ?? query.callId,
        callId: query.callId,
        tool: query.tool,
        agent: query.agent?.name,
        arguments: query.arguments,
        reason: query.reason,
      })
      const written = await writing
      id = written
      if (stopped && !kept) return questions.remove(written)
      if (!stopped) later(look)
    }
    const look = async () => {
      if (stopped || id === undefined) return
      const now = questions.mark()
      if (now === undefined || now !== mark) {
        mark = now
        const question = await questions.get(id)
        if (stopped) return
        if (question?.decision) {
          const outcome = question.decision === 'allow' ? 'allowed' : 'rejected'
          found({ outcome, answeredBy: STORE_ANSWERER, note: `answered by ${question.answeredBy ?? 'someone'} in the store (question ${id})` })
          return
        }
      }
      later(look)
    }
    if (adopted === undefined) later(write)
    else {
      id = adopted
      writing = Promise.resolve(adopted)
      later(look)
    }
    return {
      verdict,
      keep: async (answeredBy) => {
        const written = await writing?.catch(() => undefined)
        if (written === undefined) return undefined
        kept = true
        // one the store answered holds its answer already
        if (answeredBy !== STORE_ANSWERER) {
          await questions
            .answer(written, 'allow', answeredBy, this.deadline())
            .catch((error) => this.logger.warn('an answer could not be kept with its question: %s', messageOf(error)))
        }
        return written
      },
      stop: () => {
        stopped = true
        clearTimeout(timer)
        if (id !== undefined && !kept) this.forget(id)
      },
    }
  }

  /** the questions waiting for a person in the store, this process's and others' (`elsewhere`: others' not answered yet) */
  async pending(options: { elsewhere?: boolean } = {}): Promise<PendingQuestion[]> {
    if (!this.questions?.store.open) return []
    return options.elsewhere ? this.questions.elsewhere() : this.questions.list()
  }

  /** answers a question waiting in the store, whichever process asked it; false when there is none not yet answered */
  async answer(id: string, decision: Decision, by = 'api'): Promise<boolean> {
    if (!this.questions?.store.open) throw new TypeError('approval.answer: the questions waiting for a person are kept in a store; load @faber/store')
    return this.questions.answer(id, decision, by)
  }

  /**
   * a deadline in `answerers` under a name no loaded plugin has (approval-termnal) would bound nothing, without a word;
   * once a request is made, each such name is warned about once, with the name it most likely meant
   */
  private checkAnswererNames() {
    const unchecked = Object.keys(this.config.answerers).filter((name) => !this.checkedAnswerers.has(name))
    if (!unchecked.length) return
    const loaded = [...this.pluginNames()]
    for (const name of unchecked) {
      if (loaded.includes(name)) {
        this.checkedAnswerers.add(name)
        continue
      }
      this.checkedAnswerers.add(name)
      const near = nearestKey(name, loaded)
      this.logger.warn(
        'answerers.%s names no loaded plugin, so its deadline applies to nothing%s',
        name,
        near ? `; did you mean ${near}?` : ` (loaded: ${loaded.join(', ')})`,
      )
    }
  }

  /** the answerers in order; the first answer counts */
  private async ask(query: ApprovalQuery, asking: Asking): Promise<Verdict> {
    this.checkAnswererNames()
    const deadline = (plugin: string) => this.config.answerers[plugin]?.timeoutMs
    const answer = await firstAnswer(this.listeners('approval/request', query.agent), [query], {
      deadline,
      asking: (plugin) => void (asking.plugin = plugin),
    })
    asking.answered = true
    if (!answer) return { outcome: 'unavailable', answeredBy: 'none', note: 'no answerer answered' }
    const { plugin } = answer
    if (answer.failed) {
      this.logger.warn('the answerer of plugin "%s" threw on "%s" (denied): %s', plugin, query.tool, messageOf(answer.error))
      return { outcome: 'unavailable', answeredBy: plugin, note: `the answerer threw: ${messageOf(answer.error)}` }
    }
    if (answer.value === TIMED_OUT)
      return { outcome: 'timed-out', answeredBy: plugin, note: `no answer came within ${formatDuration(deadline(plugin)!)} (the deadline of ${plugin})` }
    const problem = malformed(answer.value)
    if (problem) return { outcome: 'unavailable', answeredBy: plugin, note: `the answer was malformed: ${problem}` }
    if (query.signal.aborted) return { outcome: 'cancelled', answeredBy: 'caller' }
    return this.answered(query, answer.value as ApprovalAnswer, plugin)
  }

  private async answered(query: ApprovalQuery, answer: ApprovalAnswer, plugin: string): Promise<Verdict> {
    const outcome = answer.decision === 'allow' ? 'allowed' : 'rejected'
    const remember = answer.remember ?? 'once'
    if (remember === 'once') return { outcome, answeredBy: plugin, note: answer.note }
    const input: GrantInput = {
      tool: answer.grant?.tool ?? query.tool,
      arguments: answer.grant?.arguments,
      command: answer.grant?.command,
      agent: query.agent?.name,
      // a grant for the session is for this conversation's session, when the agent serves several
      ...(remember === 'session' && query.exec?.session !== undefined ? { session: query.exec.session } : {}),
      decision: answer.decision,
      scope: remember,
    }
    if (!answer.grant && query.exec?.tool.annotations.shell === true) Object.assign(input, commandGrant(query.arguments))
    try {
      const grant = await this.grant(input, plugin)
      return { outcome, answeredBy: plugin, remember, grant: grant.id, note: answer.note }
    } catch (error) {
      // the answer stands; only remembering it for good failed
      const session = query.exec?.session
      const grant = await this.grant({ ...input, scope: 'session', ...(session !== undefined ? { session } : {}) }, plugin)
      const note = `the grant was kept for this session only: ${messageOf(error)}`
      this.logger.warn(note)
      return { outcome, answeredBy: plugin, remember: 'session', grant: grant.id, note }
    }
  }

  /** a call ended (tools/result): if approval allowed it, the audit trail says how it ended, the body's run included */
  settled(exec: Execution, result: ToolResult) {
    const id = this.allowed.get(exec.token)
    if (id === undefined) return
    this.allowed.delete(exec.token)
    const question = this.kept.get(exec.token)
    if (question !== undefined) {
      this.kept.delete(exec.token)
      this.forget(question)
    }
    this.audit('approval/settled', exec.agent, {
      id,
      agent: exec.agent,
      tool: exec.name,
      callId: exec.callId,
      outcome: result.isError ? result.error.code : 'ok',
      ...(result.isError && result.error.withheldBy ? { withheldBy: result.error.withheldBy } : {}),
    })
  }

  private audit<K extends 'approval/asked' | 'approval/decided' | 'approval/settled'>(event: K, agent: Agent | undefined, payload: Parameters<Events[K]>[0]) {
    const failed = (plugin: string, error: unknown) => this.logger.warn('an %s observer of plugin "%s" threw (ignored): %s', event, plugin, messageOf(error))
    emitEach(this.listeners(event, agent), [payload], failed)
  }
}
