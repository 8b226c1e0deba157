import { type Agent, type ApprovalOutcome, type ApprovalRequest, type ApprovalService, agentOf, type Execution, type Json, RUN_CODE } from '@faber/core'
import { type Context, type Events, Schema, Service } from 'cordis'
import { compileMatcher, type Decision, type Grant, GrantFile, GrantFileError, type GrantInput, type GrantScope, type Matcher, newGrant } from './grants.ts'
import * as RulesAnswerer from './rules.ts'

export * from './grants.ts'
export * as RulesAnswerer from './rules.ts'
export * as TerminalAnswerer from './terminal.ts'

type Awaitable<T> = T | Promise<T>

/** what an answerer is asked: the core's request plus an id and whether the call was made inside run_code */
export interface ApprovalQuery extends ApprovalRequest {
  readonly id: string
  readonly nested: boolean
}

export interface ApprovalAnswer {
  decision: Decision
  /** `once` (the default): this call only; `session` and `always` also record a grant */
  remember?: GrantScope
  /** narrows the recorded grant; by default it covers this tool for this agent */
  grant?: { tool?: string; arguments?: Record<string, string> }
  /** for the audit trail, e.g. which rule decided */
  note?: string
}

export interface ApprovalAsked {
  id: string
  agent?: Agent
  tool: string
  arguments: Json
  callId: string
  reason: string
  program?: string
  nested: boolean
}

export interface ApprovalDecided {
  id: string
  agent?: Agent
  tool: string
  callId: string
  outcome: ApprovalOutcome
  /** the answerer's plugin; `policy` for never/auto, `none` when nobody answered, `caller` when the call was cancelled */
  answeredBy: string
  remember?: GrantScope
  /** the grant recorded by this answer, or the one that decided it */
  grant?: string
  /** why the outcome is unavailable, or why a remembered grant could not be kept as asked */
  note?: string
  durationMs: number
}

declare module 'cordis' {
  interface Events {
    /** answerers: answer, or return nothing to let the next one answer; a throw or a malformed answer denies */
    'approval/request'(query: ApprovalQuery): Awaitable<ApprovalAnswer | undefined | void>
    'approval/asked'(event: ApprovalAsked): void
    'approval/decided'(event: ApprovalDecided): void
  }
}

// a listener's context comes typed from @cordisjs/core; only its scope is read here
type Hook = { ctx: any; callback: (...args: any[]) => any }

function pluginName(ctx: any): string {
  const runtime = ctx.scope?.runtime
  return runtime?.name || runtime?.plugin?.name || 'anonymous'
}

function messageOf(error: unknown) {
  return error instanceof Error ? error.message : String(error)
}

function nameMatcher(patterns: readonly string[]) {
  const compiled = patterns.map((pattern) => compileMatcher({ tool: pattern }))
  return (name: string) => compiled.some((matches) => matches(name, undefined, null))
}

const SCOPES: readonly unknown[] = ['once', 'session', 'always']

/** why an answer is not one, or undefined */
function malformed(answer: unknown): string | undefined {
  if (typeof answer !== 'object') return `it answered ${JSON.stringify(answer)}, not { decision }`
  const { decision, remember, grant, note } = answer as ApprovalAnswer
  if (note !== undefined && typeof note !== 'string') return 'its note is not a string'
  if (decision !== 'allow' && decision !== 'reject') return `its decision ${JSON.stringify(decision)} is neither "allow" nor "reject"`
  if (remember !== undefined && !SCOPES.includes(remember)) return `its remember ${JSON.stringify(remember)} is not once, session or always`
  if (grant !== undefined) {
    try {
      compileMatcher({ tool: grant.tool ?? 'x', arguments: grant.arguments })
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

interface Verdict {
  outcome: ApprovalOutcome
  answeredBy: string
  remember?: GrantScope
  grant?: string
  note?: string
}

class Approval extends Service implements ApprovalService {
  static name = 'approval'
  declare ctx: Context
  private sequence = 0
  private rules: Rule[]
  private requires: (name: string) => boolean
  private memory: { grant: Grant; matches: Matcher }[] = []
  private persisted: { grant: Grant; matches: Matcher }[] = []
  private file?: GrantFile
  private loading: Promise<void>
  /** why the grant file is not in use, when it is not */
  fileError?: GrantFileError

  constructor(
    ctx: Context,
    public config: Approval.Config,
  ) {
    super(ctx, 'approval', true)
    this.config = config = Approval.Config(config ?? {})
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
    if (config.file) this.file = new GrantFile(config.file)
    this.loading = this.reload()

    ctx.on('tools/pre-execute', (exec: Execution) => {
      if (this.requires(exec.name)) return { kind: 'ask', reason: `this deployment requires approval for "${exec.name}"` }
    })
    ctx.plugin(RulesAnswerer)
  }

  /** true when `always` grants can be written to the grant file */
  get persistent() {
    return !!this.file && !this.fileError
  }

  /** reads the grant file again; a problem is kept in `fileError` and logged, and the file is left as it is */
  async reload(): Promise<void> {
    if (!this.file) return
    try {
      this.persisted = (await this.file.read()).map((grant) => ({ grant, matches: compileMatcher(grant) }))
      this.fileError = undefined
    } catch (error) {
      this.persisted = []
      this.fileError = error instanceof GrantFileError ? error : new GrantFileError(this.file.path, messageOf(error))
      this.ctx.logger('approval').error(this.fileError.message)
    }
  }

  /** every remembered grant: once and session ones in memory, always ones from the file */
  grants(): Grant[] {
    return [...this.memory, ...this.persisted].map((entry) => entry.grant)
  }

  /** records a grant; an `always` grant is written to the grant file, and fails when there is none or it is unusable */
  async grant(input: GrantInput, by = 'api'): Promise<Grant> {
    if (!SCOPES.includes(input?.scope)) throw new TypeError('approval.grant: scope must be "once", "session" or "always"')
    if (input.decision !== undefined && input.decision !== 'allow' && input.decision !== 'reject') {
      throw new TypeError('approval.grant: decision must be "allow" or "reject"')
    }
    const matches = compileMatcher(input)
    const grant = newGrant(input, by)
    if (input.scope !== 'always') {
      this.memory.push({ grant, matches })
      return grant
    }
    await this.loading
    if (!this.file) throw new TypeError('approval.grant: "always" needs a grant file; set the `file` config')
    if (this.fileError) throw this.fileError
    await this.writeFile((grants) => [...grants, grant])
    return grant
  }

  /** removes a grant by id; true when there was one */
  async revoke(id: string): Promise<boolean> {
    const index = this.memory.findIndex((entry) => entry.grant.id === id)
    if (index >= 0) {
      this.memory.splice(index, 1)
      return true
    }
    await this.loading
    if (!this.file || !this.persisted.some((entry) => entry.grant.id === id)) return false
    if (this.fileError) throw this.fileError
    await this.writeFile((grants) => grants.filter((grant) => grant.id !== id))
    return true
  }

  private async writeFile(change: (grants: Grant[]) => Grant[]) {
    try {
      const grants = await this.file!.update(change)
      this.persisted = grants.map((grant) => ({ grant, matches: compileMatcher(grant) }))
    } catch (error) {
      if (error instanceof GrantFileError) {
        this.fileError = error
        this.ctx.logger('approval').error(error.message)
      }
      throw error
    }
  }

  /**
   * what the configured rules and the remembered grants say about a request: reject wins over allow, and a once grant
   * is used up only when nothing longer-lived allows the call. the rules answerer answers with it.
   */
  match(query: Pick<ApprovalRequest, 'tool' | 'agent' | 'arguments'>): { decision: Decision; by: string } | undefined {
    const agent = query.agent?.name
    const hits: { decision: Decision; by: string; grant?: Grant }[] = [
      ...this.rules.filter((rule) => rule.matches(query.tool, agent, query.arguments)).map((rule) => ({ decision: rule.decision, by: `rule ${rule.name}` })),
      ...[...this.persisted, ...this.memory]
        .filter((entry) => entry.matches(query.tool, agent, query.arguments))
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

  async request(request: ApprovalRequest): Promise<ApprovalOutcome> {
    if (typeof request !== 'object' || request === null || typeof request.tool !== 'string' || !(request.signal instanceof AbortSignal)) {
      throw new TypeError('approval.request: pass { tool, arguments, callId, reason, signal, agent?, program?, exec? }')
    }
    const started = performance.now()
    const query: ApprovalQuery = Object.freeze({ ...request, id: `approval-${++this.sequence}`, nested: request.exec?.parent !== undefined })
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
    const verdict = await this.decide(query)
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

  private async decide(query: ApprovalQuery): Promise<Verdict> {
    if (query.signal.aborted) return { outcome: 'cancelled', answeredBy: 'caller' }
    const { policy } = this.config
    if (policy === 'never') return { outcome: 'rejected', answeredBy: 'policy', note: 'the approval policy is never' }
    if (policy === 'auto' && query.exec?.tool.annotations.readOnly === true) {
      return { outcome: 'allowed', answeredBy: 'policy', note: `the approval policy is auto and "${query.tool}" is read-only` }
    }
    await this.loading
    let onAbort!: () => void
    const aborted = new Promise<Verdict>((resolve) => {
      onAbort = () => resolve({ outcome: 'cancelled', answeredBy: 'caller' })
      query.signal.addEventListener('abort', onAbort, { once: true })
    })
    try {
      // a late answer loses the race and is discarded: nothing it asked to remember is recorded
      return await Promise.race([aborted, this.ask(query)])
    } finally {
      query.signal.removeEventListener('abort', onAbort)
    }
  }

  /** the answerers in order; the first answer counts */
  private async ask(query: ApprovalQuery): Promise<Verdict> {
    const hooks = ((this.ctx.root.lifecycle as unknown as { _hooks: Record<string, Hook[]> })._hooks['approval/request'] ?? []).filter((hook) => {
      const owner = agentOf(hook.ctx)
      return owner === undefined || query.agent?.isWithin(owner) === true
    })
    for (const hook of hooks) {
      const plugin = pluginName(hook.ctx)
      let answer: unknown
      try {
        answer = await hook.callback(query)
      } catch (error) {
        this.ctx.logger('approval').warn('the answerer of plugin "%s" threw on "%s" (denied): %s', plugin, query.tool, messageOf(error))
        return { outcome: 'unavailable', answeredBy: plugin, note: `the answerer threw: ${messageOf(error)}` }
      }
      if (answer === undefined || answer === null) continue
      const problem = malformed(answer)
      if (problem) return { outcome: 'unavailable', answeredBy: plugin, note: `the answer was malformed: ${problem}` }
      if (query.signal.aborted) return { outcome: 'cancelled', answeredBy: 'caller' }
      return this.answered(query, answer as ApprovalAnswer, plugin)
    }
    return { outcome: 'unavailable', answeredBy: 'none', note: 'no answerer answered' }
  }

  private async answered(query: ApprovalQuery, answer: ApprovalAnswer, plugin: string): Promise<Verdict> {
    const outcome = answer.decision === 'allow' ? 'allowed' : 'rejected'
    const remember = answer.remember ?? 'once'
    if (remember === 'once') return { outcome, answeredBy: plugin, note: answer.note }
    const input: GrantInput = {
      tool: answer.grant?.tool ?? query.tool,
      arguments: answer.grant?.arguments,
      agent: query.agent?.name,
      decision: answer.decision,
      scope: remember,
    }
    try {
      const grant = await this.grant(input, plugin)
      return { outcome, answeredBy: plugin, remember, grant: grant.id, note: answer.note }
    } catch (error) {
      // the answer stands; only remembering it for good failed
      const grant = await this.grant({ ...input, scope: 'session' }, plugin)
      const note = `the grant was kept for this session only: ${messageOf(error)}`
      this.ctx.logger('approval').warn(note)
      return { outcome, answeredBy: plugin, remember: 'session', grant: grant.id, note }
    }
  }

  private audit<K extends 'approval/asked' | 'approval/decided'>(event: K, agent: Agent | undefined, payload: Parameters<Events[K]>[0]) {
    const hooks = (this.ctx.root.lifecycle as unknown as { _hooks: Record<string, Hook[]> })._hooks[event] ?? []
    for (const hook of hooks) {
      const owner = agentOf(hook.ctx)
      if (owner !== undefined && !agent?.isWithin(owner)) continue
      try {
        hook.callback(payload)
      } catch (error) {
        this.ctx.logger('approval').warn('an %s observer of plugin "%s" threw (ignored): %s', event, pluginName(hook.ctx), messageOf(error))
      }
    }
  }
}

namespace Approval {
  export interface Rule {
    name?: string
    tool: string
    arguments?: Record<string, string>
    agent?: string
    decision: Decision
  }

  export interface Config {
    policy: 'ask' | 'never' | 'auto'
    require: string[]
    except: string[]
    rules: Rule[]
    file?: string
  }

  export interface Input {
    policy?: 'ask' | 'never' | 'auto'
    require?: string[]
    except?: string[]
    rules?: (Omit<Rule, 'decision'> & { decision: Decision })[]
    file?: string
  }

  export const Config: Schema<Input, Config> = Schema.object({
    policy: Schema.union(['ask', 'never', 'auto'] as const)
      .default('ask')
      .description('ask: answerers decide; never: reject without asking; auto: allow read-only tools without asking, ask for the rest'),
    require: Schema.array(Schema.string()).default(['*']).description('tool-name patterns whose calls need approval (other plugins may ask for more)'),
    except: Schema.array(Schema.string())
      .default([RUN_CODE])
      .description('tool-name patterns exempt from require; run_code by default, since each of its nested calls is asked on its own'),
    rules: Schema.array(
      Schema.object({
        name: Schema.string(),
        tool: Schema.string().required().description('a tool-name pattern'),
        arguments: Schema.dict(Schema.string()).description('JSON path → regular expression; all must match'),
        agent: Schema.string().description("an agent's name; absent: any agent"),
        decision: Schema.union(['allow', 'reject'] as const).required(),
      }),
    )
      .default([])
      .description('standing answers of the rules answerer; reject wins over allow'),
    file: Schema.string().description('a JSON file for "always" grants (readable and editable by the operator)'),
  }) as Schema<Input, Config>
}

export default Approval
export { Approval }
