import type { Agent, ApprovalOutcome, ApprovalRequest, ApprovalService, DeniedBy, ErrorCode, Execution, ToolResult } from '@faber/core'
import { defineConfig, listenersFor, loadedPlugins, RUN_CODE } from '@faber/core'
import { type Context, Schema, Service } from 'cordis'
import { Broker, type ListenersFor } from './broker.ts'
import { type ElicitationRequest, type ElicitationResult, Elicitor } from './elicit.ts'
import type { Decision, Grant, GrantInput, GrantScope } from './grants.ts'
import type { PendingQuestion } from './pending.ts'
import * as RulesAnswerer from './rules.ts'

export * from './commands.ts'
export * from './elicit.ts'
export * from './grants.ts'
export { type PendingQuestion, PendingQuestions } from './pending.ts'
export * as TerminalAnswerer from './terminal.ts'
export { type AskLine, shareTerminal } from './terminal.ts'
export { WEB_ANSWERER, type WebAnswer, WebAnswerer, type WebAnswererChange } from './web.ts'

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
  grant?: { tool?: string; arguments?: Record<string, string>; command?: string }
  /** for the audit trail, e.g. which rule decided */
  note?: string
}

/** the request as it was asked (without its signal and execution), for the audit trail */
export interface ApprovalAsked extends Omit<ApprovalRequest, 'signal' | 'exec'> {
  id: string
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

/**
 * how a call approval allowed ended, so the audit trail says whether what was approved ran: `ok`, or the result's
 * error code — `RESULT_WITHHELD` (the body ran, a later stage withheld its result; `withheldBy` says which),
 * `TOOL_FAILED`, `DENIED` by a guard after approval, and so on
 */
export interface ApprovalSettled {
  /** the id of the request that allowed the call (its `approval/asked` and `approval/decided`) */
  id: string
  agent?: Agent
  tool: string
  callId: string
  outcome: 'ok' | ErrorCode
  withheldBy?: DeniedBy
}

declare module 'cordis' {
  interface Events {
    /** answerers: answer, or return nothing to let the next one answer; a throw or a malformed answer denies */
    'approval/request'(query: ApprovalQuery): Awaitable<ApprovalAnswer | undefined | void>
    'approval/asked'(event: ApprovalAsked): void
    'approval/decided'(event: ApprovalDecided): void
    'approval/settled'(event: ApprovalSettled): void
  }
}

/** `ctx.approval`: asks answerers, remembers grants, audits; the work is done by a Broker */
class Approval extends Service implements ApprovalService {
  static name = 'approval'
  /** the deployment's store keeps always grants; it may come and go while the service runs */
  static inject = { store: { required: false } }
  /** starting it reaches no network and writes nothing but through ctx.store (faber replay gives it a copy) */
  static replay = 'inert' as const
  declare ctx: Context
  private broker: Broker
  private elicitor: Elicitor

  constructor(
    ctx: Context,
    public config: Approval.Config,
  ) {
    super(ctx, 'approval', true)
    this.config = config = Approval.Config(config ?? {})
    const root = ctx.root
    const listeners: ListenersFor = (event, agent) => listenersFor(root, event, agent)
    const broker = new Broker(config, listeners, ctx.logger('approval'), () => loadedPlugins(root))
    this.broker = broker
    this.elicitor = new Elicitor(listeners, ctx.logger('approval'), () => this.config.elicitationTimeoutMs)
    // a store whose grants cannot be used (one a newer Faber wrote, say) fails this plugin as cordis fails any plugin
    // whose work rejects, whichever of the two was loaded first: the runtime then runs no tool until it is fixed
    const bind = () => {
      const ready = broker.useStore(ctx.get('store')?.connection)
      if (ready) ctx.scope.ensure(() => ready)
    }
    bind()
    ctx.on('internal/service', (name) => {
      if (name === 'store') bind()
    })
    ctx.on('tools/pre-execute', (exec: Execution) => {
      if (broker.requires(exec.name)) return { kind: 'ask', reason: `this deployment requires approval for "${exec.name}"` }
    })
    ctx.plugin(RulesAnswerer, { match: (query) => broker.match(query) })
    ctx.on('tools/session-end', ({ session }) => broker.endSession(session))
    ctx.on('agent/session', ({ agent, id }) => broker.sessionStarted(agent, id))
    ctx.on('agent/session-end', ({ agent, id }) => broker.sessionEnded(agent, id))
    ctx.on('tools/result', (exec: Execution, result: ToolResult) => broker.settled(exec, result))
  }

  request(request: ApprovalRequest): Promise<ApprovalOutcome> {
    return this.broker.request(request)
  }

  /**
   * asks the answerers to fill in a form (an imported MCP server's `elicitation/create`): the first answer counts,
   * fields left out take the schema's defaults, nobody answering or the deadline passing is `cancel`; audited as
   * `approval/elicited`
   */
  elicit(request: ElicitationRequest): Promise<ElicitationResult> {
    return this.elicitor.elicit(request)
  }

  /** true when `always` grants can be kept: a store is loaded */
  get persistent(): boolean {
    return this.broker.persistent
  }

  /** every remembered grant: once and session ones in memory, always ones from the store (as other processes left them) */
  grants(): Promise<Grant[]> {
    return this.broker.grants()
  }

  /** records a grant; an `always` grant is committed to the store before this resolves, and fails without one */
  grant(input: GrantInput): Promise<Grant> {
    return this.broker.grant(input)
  }

  /** removes a grant by id; true when there was one */
  revoke(id: string): Promise<boolean> {
    return this.broker.revoke(id)
  }

  /**
   * the questions waiting for a person, as the store keeps them (a request still unanswered after grantWatchMs is
   * written there), this process's and every other's sharing the store; `elsewhere`: only those other processes asked
   * that no one answered yet (what the web view lists beside its own)
   */
  pending(options?: { elsewhere?: boolean }): Promise<PendingQuestion[]> {
    return this.broker.pending(options)
  }

  /** answers a question waiting in the store: the process that asked it goes on within grantWatchMs; false when none is open by that id */
  answer(id: string, decision: Decision, by?: string): Promise<boolean> {
    return this.broker.answer(id, decision, by)
  }

  /** what the configured rules and the remembered grants say about a request (what the rules answerer answers) */
  match(query: Pick<ApprovalRequest, 'tool' | 'agent' | 'arguments'> & { exec?: { session?: string } }) {
    return this.broker.match(query)
  }
}

namespace Approval {
  export interface Rule {
    name?: string
    tool: string
    arguments?: Record<string, string>
    command?: string
    agent?: string
    decision: Decision
  }

  export interface Config {
    policy: 'ask' | 'never' | 'auto'
    require: string[]
    except: string[]
    rules: Rule[]
    /** a request with no answer by then is denied as timed-out */
    timeoutMs: number
    /** per answerer (by plugin name): a shorter deadline of its own */
    answerers: Record<string, { timeoutMs?: number }>
    elicitationTimeoutMs: number
    /** while a request waits, how often the store's grants are looked at again */
    grantWatchMs: number
  }

  export interface ConfigInput {
    policy?: 'ask' | 'never' | 'auto'
    require?: string[]
    except?: string[]
    rules?: (Omit<Rule, 'decision'> & { decision: Decision })[]
    timeoutMs?: number
    answerers?: Record<string, { timeoutMs?: number }>
    elicitationTimeoutMs?: number
    grantWatchMs?: number
  }

  export const Config = defineConfig<Config, ConfigInput>()(
    Schema.object({
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
          command: Schema.string().description('a shell-command pattern for the command argument, e.g. "git diff *" (see the README for how it matches)'),
          agent: Schema.string().description("an agent's name; absent: any agent"),
          decision: Schema.union(['allow', 'reject'] as const).required(),
        }),
      )
        .default([])
        .description('standing answers of the rules answerer; reject wins over allow'),
      timeoutMs: Schema.natural()
        .min(1)
        .default(5 * 60_000)
        .description('a request with no answer by then is denied, saying no answer came in time; answerers see its signal abort'),
      answerers: Schema.dict(Schema.object({ timeoutMs: Schema.natural().min(1).description('how long this answerer may take before the request is denied') }))
        .default({})
        .description('per answerer, by plugin name (e.g. approval-terminal): a deadline of its own'),
      elicitationTimeoutMs: Schema.natural()
        .min(1)
        .default(600_000)
        .description('how long a form (an imported MCP server asking its user) waits for an answer before it is cancelled'),
      grantWatchMs: Schema.natural()
        .min(10)
        .default(1000)
        .description(
          'while a request waits for an answer, how often the grants in the store are looked at again: one another process recorded (faber grants import, its always answer) answers it',
        ),
    }),
  )
}

export default Approval
export { Approval }
