// `faber replay`: recorded session logs through a deployment's real pipeline, tool bodies never run. every recorded
// call goes through create (the collapse), tools/pre-execute, approval (rules and grants only), guards; the outermost
// tools/execute wrapper answers with the recorded result instead of running the body, so later calls see the world
// the session saw. nothing is written: stores are held as in-memory snapshots, approvals never reach a person.

import { stat } from 'node:fs/promises'
import { resolve as resolvePath } from 'node:path'
import { type RecordedAnswer, type RecordedCall, RecordedCallsError, type RecordedNestedCall, type RecordedOutcome, streamRecordedCalls } from '@faber/agent'
import {
  type Agent,
  ERROR_CODES,
  type ErrorCode,
  type Execution,
  type Executor,
  emitEach,
  errorResult,
  type Json,
  listenersFor,
  messageOf,
  type ReplayRole,
  RUN_CODE,
  replayRole,
  type ToolResult,
} from '@faber/core'
import DeploymentStore, { PostgresCopy, SqliteStore, type Store, storeUrl } from '@faber/store'
import { type Context, Service } from 'cordis'
import {
  compose,
  type Deployed,
  DeploymentError,
  type DeploymentSpec,
  describe,
  type LoadedPlugin,
  loadPlugins,
  type Path,
  type PluginSpec,
} from './deployment.ts'

export type Verdict = 'allow' | 'deny' | 'ask' | 'unknown' | 'error'

export interface Decision {
  verdict: Verdict
  /** the stage and plugin that decided a deny or an ask (the core for a call that ended at create) */
  stage?: string
  plugin?: string
  reason?: string
  code?: string
}

export interface ReplayedCall {
  log: string
  session: string
  turn: number
  agent?: string
  callId: string
  name: string
  /** the arguments as JSON text, cut at 300 characters */
  arguments: string
  /** a nested call: the run_code that made it, and the program line when the log has it */
  within?: { callId: string; line?: number; column?: number; source?: string }
  old: Decision
  new: Decision
  /** a run_code now refused: how many of its recorded nested calls it never reached */
  notReached?: number
}

export interface Tally {
  replayed: number
  changed: number
  newlyDenied: number
  newlyAllowed: number
  newlyAsked: number
}

export interface ReplayReport {
  deployment: string
  logs: { path: string; sessions: number; directCalls: number; truncated?: { line: number; bytes: number }; unknownRecords: Record<string, number> }[]
  summary: Tally & {
    unchanged: number
    /** calls of tools the deployment does not have (or of agents it does not define) */
    unknown: number
    /** nested calls of a run_code the new deployment refuses: never reached */
    notReached: number
    /** calls the log holds no result for (a session that stopped mid-step): not replayed */
    unrecorded: number
    byTool: Record<string, Tally>
    byPlugin: Record<string, { denied: number; asked: number }>
  }
  changes: ReplayedCall[]
  /** a call that was refused (denied, asked, or by the core) would now run: the exit code is 1 */
  morePermissive: boolean
}

export class ReplayInputError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ReplayInputError'
  }
}

export interface ReplayOptions {
  /** told after each call replayed, nested calls included: the calls replayed so far, and how far through the logs' bytes */
  onProgress?(progress: { calls: number; bytes: number; totalBytes: number }): void
  /** told the report while the replay's (read-only) deployment still runs, which stops once this settles (faber replay --web serves its view) */
  hold?(deployed: Deployed, report: ReplayReport): Promise<void>
}

// who answered an approval without a person: the rules answerer, and the policy (never / auto)
const RULE_ANSWERERS = new Set(['approval-rules', 'policy'])
const CODES: ReadonlySet<string> = new Set(ERROR_CODES)

// ---- the read-only deployment

/**
 * `ctx.store` as an in-memory snapshot of the configured file: the replay's writes never reach it. one copy per file
 * for the whole replay, shared by the deployments it composes (one per process the recording ran in), so a resumed
 * session finds what the replay wrote before, as the recorded one found the store
 */
function snapshotStore(copies: Map<string, Store>) {
  return class SnapshotStore extends Service {
    static name = 'store'
    static Config = DeploymentStore.Config
    declare ctx: Context
    readonly connection: Store

    constructor(ctx: Context, config: DeploymentStore.Config) {
      super(ctx, 'store', true)
      const url = storeUrl(config)
      const key = url ?? resolvePath(config.path!)
      let copy = copies.get(key)
      if (!copy) copies.set(key, (copy = url === undefined ? SqliteStore.snapshot(key) : new PostgresCopy(url)))
      this.connection = copy
    }

    get path() {
      return this.connection.path
    }
  }
}

/**
 * the deployment's plugins as a replay starts them, each as it says (its ReplayRole): as it is, left out, or a stand-in
 * in its place; the store as an in-memory copy. a plugin that says nothing is refused: what it does when it starts
 * (connect out, write) is not known, and a replay must do neither
 */
function forReplay(deployment: DeploymentSpec, loaded: LoadedPlugin[], at: Path, store: unknown): PluginSpec[] {
  const out: PluginSpec[] = []
  const refused: string[] = []
  for (const { spec: entry, plugin, config } of loaded) {
    // by name too: a deployment may resolve its own install of the package
    if (plugin === DeploymentStore || entry.use.split('#')[0] === '@faber/store') {
      out.push({ ...entry, plugin: store })
      continue
    }
    const refuse = (problem: string) => refused.push(describe(deployment.source, deployment.locate, [...at, entry.key], `"${entry.use}" ${problem}`))
    let role: ReplayRole | undefined
    let standInConfig: unknown
    try {
      role = replayRole(plugin)
      if (typeof role === 'object') {
        try {
          standInConfig = role.config ? role.config(config) : config
        } catch (error) {
          throw new Error(`its replay.config threw: ${messageOf(error)}`)
        }
      }
    } catch (error) {
      refuse(
        `cannot be replayed: ${messageOf(error)}. faber replay starts no plugin it cannot account for; fix its replay member (see @faber/core's ReplayRole)`,
      )
      continue
    }
    if (role === undefined) {
      refuse(
        'does not say what it does in a replay, so faber replay cannot start it and still promise to reach no network and write nothing. ' +
          "if starting it does neither, give the plugin replay: 'inert'; if it only observes, replay: 'omit' (see @faber/core's ReplayRole); or replay with a deployment without it",
      )
    } else if (role === 'inert') out.push({ ...entry, plugin })
    else if (role !== 'omit') out.push({ ...entry, plugin: role.plugin, config: standInConfig })
  }
  if (refused.length) throw new DeploymentError(refused.join('\n'))
  return out
}

function argumentsText(value: unknown): string {
  let text: string
  try {
    text = JSON.stringify(value) ?? String(value)
  } catch {
    text = '(arguments that cannot be shown)'
  }
  return text.length > 300 ? `${text.slice(0, 299)}…` : text
}

/** what the recorded session decided for a call */
function oldDecision(recorded: RecordedOutcome, answeredBy: string | undefined): Decision {
  const person = answeredBy !== undefined && !RULE_ANSWERERS.has(answeredBy)
  if (!recorded.isError) return person ? { verdict: 'ask', stage: 'approval', plugin: answeredBy, reason: `answered by ${answeredBy}` } : { verdict: 'allow' }
  const code = recorded.code
  const reason = recorded.content?.replace(/^Error: /, '')
  if (code === 'DENIED') {
    const { stage, plugin } = recorded.deniedBy ?? { stage: 'unknown', plugin: 'unknown' }
    if (stage === 'approval' && answeredBy !== undefined && !RULE_ANSWERERS.has(answeredBy)) return { verdict: 'ask', stage, plugin: answeredBy, reason, code }
    return { verdict: 'deny', stage, plugin, reason, code }
  }
  const ended = recorded.trace?.find((s) => s.stage === 'create')
  if (code === 'UNKNOWN_TOOL' && ended?.decision === 'unknown') return { verdict: 'unknown', stage: 'create', plugin: 'core', reason, code }
  if (code === 'UNKNOWN_TOOL' || code === 'INVALID_ARGUMENTS' || code === 'ABORTED_BEFORE_DISPATCH')
    return { verdict: 'error', stage: 'create', plugin: 'core', reason, code }
  // the body ran and failed: the policy let it through
  return { verdict: 'allow', code }
}

function newDecision(result: ToolResult, reached: boolean, asked: string | undefined): Decision {
  // a person would be asked: what the replay then answered for them (as they did in the recording) is not the policy's
  const ask = (code?: string): Decision => ({ verdict: 'ask', stage: 'approval', plugin: 'approval', reason: asked, ...(code ? { code } : {}) })
  if (!result.isError) return asked !== undefined ? ask() : { verdict: 'allow' }
  const { code, message, deniedBy } = result.error
  if (asked !== undefined && (reached || deniedBy?.stage === 'approval')) return ask(code)
  if (code === 'DENIED' && deniedBy) {
    return { verdict: 'deny', stage: deniedBy.stage, plugin: deniedBy.plugin, reason: message, code }
  }
  if (reached) return { verdict: 'allow', code }
  const created = result.trace?.find((s) => s.stage === 'create')
  if (code === 'UNKNOWN_TOOL' && created?.decision === 'unknown') return { verdict: 'unknown', stage: 'create', plugin: 'core', reason: message, code }
  return { verdict: 'error', stage: 'create', plugin: 'core', reason: message, code }
}

/** the summary's count a change to each verdict adds to */
const NEWLY: Partial<Record<Verdict, 'newlyDenied' | 'newlyAllowed' | 'newlyAsked'>> = { deny: 'newlyDenied', allow: 'newlyAllowed', ask: 'newlyAsked' }

function differs(old: Decision, now: Decision) {
  return old.verdict !== now.verdict || ((old.verdict === 'deny' || old.verdict === 'ask') && old.plugin !== now.plugin && now.verdict === 'deny')
}

/** the result a recorded outcome hands back to the pipeline in place of the body */
function replayedResult(recorded: RecordedOutcome | undefined, name: string): ToolResult {
  if (!recorded || (recorded.isError && (recorded.deniedBy || recorded.trace?.some((s) => s.stage === 'create')))) {
    // the new policy lets through a call that did not run in the recorded session: there is no result to give back
    return errorResult('ABORTED_BEFORE_DISPATCH', `faber replay: "${name}" did not run in the recorded session, so there is no result to hand back`)
  }
  const content = recorded.content ?? ''
  if (!recorded.isError) return { isError: false, value: recorded.value as Json, content }
  const code = (recorded.code && CODES.has(recorded.code) ? recorded.code : 'TOOL_FAILED') as ErrorCode
  return { isError: true, error: { code, message: content.replace(/^Error: /, ''), ...(recorded.toolCode ? { toolCode: recorded.toolCode } : {}) }, content }
}

// ---- the replay

class Replayer {
  private readonly signal = new AbortController().signal
  /** the recorded entry of the call now in the pipeline, by callId */
  private readonly current = new Map<
    string,
    { name: string; result?: RecordedOutcome; nested?: RecordedNestedCall[]; reached: boolean; answer?: RecordedAnswer }
  >()
  /** questions the replay answered for a person: callId → the reason asked */
  private readonly asked = new Map<string, string>()
  /** the recorded world's files: absolute path → version (or absent) */
  private readonly disk = new Map<string, string>()
  private readonly report: ReplayReport
  /** tells ReplayOptions.onProgress, once a call is replayed */
  private progress?: () => void
  private turn = 0
  private log = ''
  private session = ''
  private agentName?: string
  private agent?: Agent
  private missingAgent = false
  // keyed by names a log or a deployment chose: maps, never object keys (a tool named __proto__ or constructor)
  private readonly byTool = new Map<string, Tally>()
  private readonly byPlugin = new Map<string, { denied: number; asked: number }>()

  /** the deployment of the process being replayed: composed anew for each process the recording ran in */
  deployed!: Deployed
  /** processes replayed so far (each session record and each resume starts one) */
  private processes = 0
  /** the lines of the run_code whose nested calls are being replayed */
  private lines?: { outer: Execution; lines?: string[] }
  /** a process started in the log and not yet entered */
  private starting?: { resumed: boolean; turn?: number }
  // held once per deployment: reading ctx.tools builds a traced proxy each time, tens of µs a call
  private executor!: Executor
  /** @faber/plugin-approval's service, whose match() is what its rules and grants say */
  private approval?: { match?(query: unknown): Promise<{ decision: 'allow' | 'reject'; by: string } | undefined> }
  /** the fsRoot annotation of each tool, as the session's agent sees it */
  private roots = new Map<string, string | undefined>()
  /** the tool names this process's calls named so far */
  private named = new Set<string>()

  constructor(
    private composeOne: () => Promise<Deployed>,
    source: string,
  ) {
    this.report = {
      deployment: source,
      logs: [],
      summary: {
        replayed: 0,
        unchanged: 0,
        changed: 0,
        newlyDenied: 0,
        newlyAllowed: 0,
        newlyAsked: 0,
        unknown: 0,
        notReached: 0,
        unrecorded: 0,
        byTool: {},
        byPlugin: {},
      },
      changes: [],
      morePermissive: false,
    }
  }

  /** a recorded process started (a session, or a resume of one): it is entered once it makes a call */
  startProcess(resumed: boolean) {
    this.starting = { resumed }
  }

  /**
   * the recorded process that started is entered: the first uses the deployment composed up front, each later one a
   * fresh composition, so what plugins held in memory is gone as it was, and what they kept in the store (the in-memory
   * copy) is still there. a process that made no call is never composed (a forged log of resume records, or of resumes
   * and turns, costs a composition, ~10-16 ms, per record otherwise); the turn it is in is told once it is. the session
   * is announced under an id of the replay's own, so a plugin that keeps per-session state in the store (fs-observation)
   * starts from what this replay kept, never the recording's rows
   */
  private async enter() {
    if (!this.starting) return
    const { resumed, turn } = this.starting
    this.starting = undefined
    if (this.processes++ > 0) {
      await this.deployed.stop()
      this.attach(await this.composeOne())
    }
    this.agent = this.agentName === undefined ? undefined : this.deployed.agents.get(this.agentName)
    this.missingAgent = this.agentName !== undefined && !this.agent
    this.roots.clear()
    this.named.clear()
    if (!this.missingAgent) this.deployed.ctx.emit('agent/session', { agent: this.agent, id: `faber-replay:${this.session}`, resumed })
    if (!this.missingAgent && turn !== undefined) this.turnStarts(turn)
  }

  attach(deployed: Deployed) {
    this.deployed = deployed
    const { ctx } = deployed
    this.executor = ctx.tools.executor
    this.approval = ctx.get('approval') as typeof this.approval
    this.roots.clear()
    // outermost: no other wrapper and no body runs
    ctx.tools.listen('tools/execute', (exec: Execution) => this.answer(exec), { prepend: true })
    // ahead of every answerer: rules and grants answer, a question for a person is counted as asked, never shown
    ctx.on(
      'approval/request',
      async (query) => {
        const verdict = await this.approval?.match?.(query)
        // the person who answered this call in the recording: the grant their answer made is in the store's copy by now
        const person = this.current.get(query.callId)?.answer
        const theirs = person?.grant !== undefined && verdict?.by === `grant ${person.grant}`
        if (verdict && !theirs) return { decision: verdict.decision, note: `decided by ${verdict.by}` }
        this.asked.set(query.callId, query.reason)
        if (verdict) return { decision: verdict.decision, note: `faber replay: ${verdict.by}, which the person's recorded answer made` }
        // answered as they answered it, remembered as they asked, so the calls after it find the grant the recorded ones did
        if (person?.outcome === 'allowed' || person?.outcome === 'rejected') {
          const decision = person.outcome === 'allowed' ? ('allow' as const) : ('reject' as const)
          return { decision, ...(person.remember ? { remember: person.remember } : {}), note: `faber replay: as ${person.by} answered it in the recording` }
        }
        return { decision: 'reject', note: 'faber replay: a person would be asked' }
      },
      { prepend: true },
    )
    ctx.on('fs/disk-version', (file) => {
      const version = this.disk.get(file)
      return version === undefined ? {} : { version }
    })
  }

  private async answer(exec: Execution): Promise<ToolResult> {
    const entry = this.current.get(exec.callId)
    if (!entry) return errorResult('ABORTED_BEFORE_DISPATCH', `faber replay: "${exec.name}" is not a recorded call; nothing ran`)
    entry.reached = true
    if (exec.name === RUN_CODE && entry.nested) {
      for (const nested of entry.nested) await this.replayNested(nested, exec)
    }
    return replayedResult(entry.result, exec.name)
  }

  private async replayNested(nested: RecordedNestedCall, outer: Execution) {
    const within = this.within(outer, nested)
    await this.run(nested.callId, nested.name, nested.arguments, nested.outcome, nested.answer, undefined, { parent: outer.token }, within)
  }

  private within(outer: Execution, nested: RecordedNestedCall): ReplayedCall['within'] {
    const line = nested.site?.line
    const source = line === undefined ? undefined : this.programLines(outer)?.[line - 1]?.trim()
    return { callId: outer.callId, line, column: nested.site?.column, source: source?.slice(0, 200) }
  }

  /** a run_code's program split into lines once, not once per nested call (a large program with many calls was quadratic) */
  private programLines(outer: Execution): string[] | undefined {
    if (this.lines?.outer !== outer) {
      const code = (outer.arguments as { code?: unknown } | null)?.code
      this.lines = { outer, lines: typeof code === 'string' ? code.split('\n') : undefined }
    }
    return this.lines.lines
  }

  /** one call through the pipeline, compared with what was recorded */
  private async run(
    callId: string,
    name: string,
    args: unknown,
    recorded: RecordedOutcome | undefined,
    answer: RecordedAnswer | undefined,
    nested: RecordedNestedCall[] | undefined,
    how: { parent?: Execution['token']; session?: string },
    within?: ReplayedCall['within'],
  ) {
    if (!recorded) {
      this.report.summary.unrecorded++
      return
    }
    const old = oldDecision(recorded, answer?.by)
    const person = answer && !RULE_ANSWERERS.has(answer.by) ? answer : undefined
    const entry = { name, result: recorded, nested, reached: false, answer: person }
    let now: Decision
    if (this.missingAgent) {
      now = { verdict: 'unknown', stage: 'create', plugin: 'core', reason: `the deployment defines no agent named "${this.agentName}"` }
    } else {
      this.standIn(name)
      this.current.set(callId, entry)
      let result: ToolResult
      try {
        result = await this.executor.execute({
          callId,
          name,
          arguments: args,
          signal: this.signal,
          // a direct call in the conversation it came in on (an MCP session), whose policy state is its own; nested under its run_code
          ...(how.parent ? { parent: how.parent } : { agent: this.agent, ...(how.session !== undefined ? { session: how.session } : {}) }),
        })
      } catch (error) {
        result = errorResult('INVALID_ARGUMENTS', `faber replay: the recorded call could not be made: ${messageOf(error)}`)
      } finally {
        this.current.delete(callId)
      }
      now = newDecision(result, entry.reached, this.asked.get(callId))
      this.asked.delete(callId)
    }
    this.learn(name, args, recorded)
    this.tally(callId, name, args, old, now, within, nested && !entry.reached ? nested.length : undefined)
  }

  /** a tool the deployment does not have: a plugin's replay stand-in may register it from the name (replay/tool) */
  private standIn(name: string) {
    if (this.named.has(name)) return
    this.named.add(name)
    if (this.deployed.ctx.tools.get(name, this.agent)) return
    emitEach(listenersFor(this.deployed.ctx, 'replay/tool', this.agent), [name, this.agent], () => undefined)
  }

  /** a user turn begins, as the agent loop tells it (the guards' repeat breaker and per-turn limits reset on it) */
  private turnStarts(turn: number) {
    emitEach(listenersFor(this.deployed.ctx, 'agent/turn', this.agent), [{ agent: this.agent, turn }], () => undefined)
  }

  /** the recorded world moves on: what a recorded read, write or edit saw of a file */
  private learn(name: string, args: unknown, recorded: RecordedOutcome) {
    if (!this.roots.has(name)) {
      const root = this.deployed.ctx.tools.get(name, this.agent)?.annotations?.fsRoot
      this.roots.set(name, typeof root === 'string' ? root : undefined)
    }
    const root = this.roots.get(name)
    if (root === undefined) return
    const value = recorded.value as { path?: unknown; version?: unknown } | null
    if (!recorded.isError && typeof value?.path === 'string' && typeof value.version === 'string') this.disk.set(resolvePath(root, value.path), value.version)
    else if (recorded.isError && recorded.toolCode === 'FS_NOT_FOUND') {
      const path = (args as { path?: unknown } | null)?.path
      if (typeof path === 'string') this.disk.set(resolvePath(root, path), 'absent')
    }
  }

  private tally(callId: string, name: string, args: unknown, old: Decision, now: Decision, within: ReplayedCall['within'], notReached?: number) {
    const { summary } = this.report
    summary.replayed++
    this.progress?.()
    let tool = this.byTool.get(name)
    if (!tool) this.byTool.set(name, (tool = { replayed: 0, changed: 0, newlyDenied: 0, newlyAllowed: 0, newlyAsked: 0 }))
    tool.replayed++
    if (now.verdict === 'unknown') summary.unknown++
    if (notReached) summary.notReached += notReached
    if (!differs(old, now)) {
      summary.unchanged++
      return
    }
    summary.changed++
    tool.changed++
    // a call denied on both sides, by another plugin now, is a change but not newly denied
    const key = old.verdict === now.verdict ? undefined : NEWLY[now.verdict]
    if (key) {
      summary[key]++
      tool[key]++
    }
    if ((now.verdict === 'deny' || now.verdict === 'ask') && now.plugin) {
      let plugin = this.byPlugin.get(now.plugin)
      if (!plugin) this.byPlugin.set(now.plugin, (plugin = { denied: 0, asked: 0 }))
      if (now.verdict === 'deny') plugin.denied++
      else plugin.asked++
    }
    // whatever kept it from running in the recording (a denial, a person's question, the core: the collapse, a tool or
    // an argument it did not take), a call newly allowed would now run
    if (now.verdict === 'allow') this.report.morePermissive = true
    this.report.changes.push({
      log: this.log,
      session: this.session,
      turn: this.turn,
      ...(this.agentName !== undefined ? { agent: this.agentName } : {}),
      callId,
      name,
      arguments: argumentsText(args),
      ...(within ? { within } : {}),
      old,
      new: now,
      ...(notReached ? { notReached } : {}),
    })
  }

  /** reads one log as a stream, replaying each step's calls once the step is complete */
  async replayLog(path: string, totalBytes: number, bytesBefore: number, options: ReplayOptions) {
    this.log = path
    const summary: ReplayReport['logs'][number] = { path, sessions: 0, directCalls: 0, unknownRecords: {} }
    const unknown = new Map<string, number>()
    let bytes = 0
    const { onProgress } = options
    this.progress = onProgress && (() => onProgress({ calls: this.report.summary.replayed, bytes: bytesBefore + bytes, totalBytes }))
    const events = streamRecordedCalls(path, {
      onBytes: (read) => {
        bytes = read
      },
      onTruncated: (torn) => {
        summary.truncated = torn
      },
    })
    try {
      for await (const event of events) {
        switch (event.kind) {
          case 'session':
            summary.sessions++
            this.session = event.id
            this.agentName = event.agent
            this.startProcess(false)
            break
          case 'resume':
            this.startProcess(true)
            break
          case 'turn':
            if (this.starting) this.starting.turn = event.turn
            else if (!this.missingAgent) this.turnStarts(event.turn)
            break
          case 'step':
            await this.enter()
            for (const call of event.calls) {
              await this.replayCall(call)
              summary.directCalls++
            }
            break
          case 'other': {
            // a later writer's records (a checkpoint, say): counted, never acted on
            const name = event.type.slice(0, 64)
            unknown.set(name, (unknown.get(name) ?? 0) + 1)
            break
          }
        }
      }
    } catch (error) {
      if (error instanceof RecordedCallsError) throw new ReplayInputError(error.message)
      throw error
    }
    summary.unknownRecords = sorted(unknown)
    this.report.logs.push(summary)
  }

  private async replayCall(call: RecordedCall) {
    this.turn = call.turn
    if (call.badJson !== undefined) {
      // the agent loop answered it without the pipeline: arguments that are not JSON are not a policy matter
      this.tally(call.callId, call.name, call.badJson, { verdict: 'error' }, { verdict: 'error' }, undefined)
      return
    }
    await this.run(call.callId, call.name, call.arguments, call.outcome, call.answer, call.nested, { session: call.session })
  }

  finish(): ReplayReport {
    const { summary } = this.report
    summary.byTool = sorted(this.byTool)
    summary.byPlugin = sorted(this.byPlugin)
    return this.report
  }
}

/** a map as an object with its keys in order (fromEntries defines each key as data, __proto__ included) */
function sorted<T>(map: ReadonlyMap<string, T>): Record<string, T> {
  return Object.fromEntries([...map].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
}

/**
 * replays session logs through a deployment: composes it read-only (its stores as in-memory snapshots), runs every
 * recorded call through the real pipeline with tool bodies never run, and reports what the deployment decides
 * differently. throws ReplayInputError for a log it cannot read (the CLI's exit code 2)
 */
export async function replay(logs: string[], deployment: DeploymentSpec, options: ReplayOptions = {}): Promise<ReplayReport> {
  if (!logs.length) throw new ReplayInputError('faber replay: no session log given; name one or more JSONL logs (faber run/chat/demo --log FILE)')
  const sizes: number[] = []
  for (const log of logs) {
    try {
      const info = await stat(log)
      if (!info.isFile()) throw new ReplayInputError(`${log}: not a file; name a JSONL session log`)
      sizes.push(info.size)
    } catch (error) {
      if (error instanceof ReplayInputError) throw error
      throw new ReplayInputError(`${log}: cannot read the log (${(error as NodeJS.ErrnoException).code ?? messageOf(error)})`)
    }
  }
  const copies = new Map<string, Store>()
  const store = snapshotStore(copies)
  const loaded = await loadPlugins(deployment)
  const spec: DeploymentSpec = {
    ...deployment,
    plugins: forReplay(deployment, loaded.global, ['plugins'], store),
    agents: deployment.agents.map((agent, index) => ({
      ...agent,
      plugins: forReplay(deployment, loaded.agents.get(agent.name) ?? [], ['agents', index, 'plugins'], store),
    })),
    session: { ...deployment.session, log: undefined },
  }
  const replayer = new Replayer(() => compose(spec), deployment.source)
  try {
    replayer.attach(await compose(spec))
    const totalBytes = sizes.reduce((a, b) => a + b, 0)
    let before = 0
    for (const [index, log] of logs.entries()) {
      await replayer.replayLog(log, totalBytes, before, options)
      before += sizes[index]
    }
    const report = replayer.finish()
    await options.hold?.(replayer.deployed, report)
    return report
  } finally {
    await replayer.deployed?.stop()
    for (const copy of copies.values()) await copy.close()
  }
}

/** 1 when a call that was refused (denied, asked, or by the core) would now run, else 0 */
export function replayExitCode(report: ReplayReport): 0 | 1 {
  return report.morePermissive ? 1 : 0
}
