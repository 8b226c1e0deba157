// `faber replay`: recorded session logs through a deployment's real pipeline, tool bodies never run. every recorded
// call goes through create (the collapse), tools/pre-execute, approval (rules and grants only), guards; the outermost
// tools/execute wrapper answers with the recorded result instead of running the body, so later calls see the world
// the session saw. nothing is written: stores are held as in-memory snapshots, approvals never reach a person.

import { createReadStream } from 'node:fs'
import { stat } from 'node:fs/promises'
import { resolve as resolvePath } from 'node:path'
import { createInterface } from 'node:readline'
import { LOG_VERSION } from '@faber/agent'
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
  RUN_CODE,
  type ToolResult,
} from '@faber/core'
import DeploymentStore, { SqliteStore, type Store } from '@faber/store'
import { type Context, Service } from 'cordis'
import { compose, type Deployed, type DeploymentSpec, type PluginSpec } from './deployment.ts'

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
  /** a call that was denied or asked would now run: the exit code is 1 */
  morePermissive: boolean
}

export class ReplayInputError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ReplayInputError'
  }
}

export interface ReplayOptions {
  /** told after each direct call: the calls replayed so far, and how far through the logs' bytes */
  onProgress?(progress: { calls: number; bytes: number; totalBytes: number }): void
  /** told the report while the replay's (read-only) deployment still runs, which stops once this settles (faber replay --web serves its view) */
  hold?(deployed: Deployed, report: ReplayReport): Promise<void>
}

// who answered an approval without a person: the rules answerer, and the policy (never / auto)
const RULE_ANSWERERS = new Set(['approval-rules', 'policy'])
// the record types of LOG_VERSION 2; anything else (a later writer's checkpoints, say) is counted and passed over
const KNOWN_RECORDS = new Set([
  'session',
  'resume',
  'turn',
  'message',
  'model',
  'call',
  'result',
  'nested-call',
  'nested-result',
  'approval',
  'turn-end',
  'retry',
])
const CODES: ReadonlySet<string> = new Set(ERROR_CODES)
const MAX_LINE = 256 * 1024 * 1024

/** the recorded outcome of one call, as the log has it */
interface Recorded {
  isError: boolean
  value?: Json
  code?: string
  toolCode?: string
  deniedBy?: { stage: string; plugin: string }
  trace?: { stage: string; decision: string; by?: string }[]
  content?: string
}

interface NestedEntry {
  callId: string
  name: string
  arguments: unknown
  line?: number
  column?: number
  result?: Recorded
}

interface DirectEntry {
  callId: string
  name: string
  turn: number
  /** the parsed arguments, or the parse error */
  arguments: unknown
  badJson?: string
  nested: NestedEntry[]
  result?: Recorded
}

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
      if (config.path === undefined) {
        throw new TypeError('faber replay holds a SQLite store (path) as an in-memory copy; a PostgreSQL store (url, urlEnv) cannot be replayed read-only')
      }
      const file = resolvePath(config.path)
      let copy = copies.get(file)
      if (!copy) copies.set(file, (copy = SqliteStore.snapshot(file)))
      this.connection = copy
    }

    get path() {
      return this.connection.path
    }
  }
}

function readOnly(plugins: PluginSpec[], store: unknown): PluginSpec[] {
  return plugins.map((entry) => (entry.use.split('#')[0] === '@faber/store' && !entry.plugin ? { ...entry, plugin: store } : entry))
}

// ---- reading records

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function recordedOutcome(record: Record<string, unknown>, where: string): Recorded {
  if (typeof record.isError !== 'boolean') throw new ReplayInputError(`${where}: a result without isError (true or false); the log is not one Faber wrote`)
  if (!record.isError && !('value' in record))
    throw new ReplayInputError(`${where}: a successful result without its value; the log is not one Faber ${LOG_VERSION} wrote`)
  const deniedBy = isObject(record.deniedBy) ? { stage: String(record.deniedBy.stage), plugin: String(record.deniedBy.plugin) } : undefined
  const trace = Array.isArray(record.trace)
    ? record.trace.filter(isObject).map((s) => ({ stage: String(s.stage), decision: String(s.decision), by: typeof s.by === 'string' ? s.by : undefined }))
    : undefined
  return {
    isError: record.isError,
    value: record.value as Json,
    code: typeof record.code === 'string' ? record.code : undefined,
    toolCode: typeof record.toolCode === 'string' ? record.toolCode : undefined,
    deniedBy,
    trace,
    content: typeof record.content === 'string' ? record.content : undefined,
  }
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
function oldDecision(recorded: Recorded, answeredBy: string | undefined): Decision {
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
  if (!result.isError) return { verdict: 'allow' }
  const { code, message, deniedBy } = result.error
  if (code === 'DENIED' && deniedBy) {
    if (deniedBy.stage === 'approval' && asked !== undefined) return { verdict: 'ask', stage: 'approval', plugin: 'approval', reason: asked, code }
    return { verdict: 'deny', stage: deniedBy.stage, plugin: deniedBy.plugin, reason: message, code }
  }
  if (reached) return { verdict: 'allow', code }
  const created = result.trace?.find((s) => s.stage === 'create')
  if (code === 'UNKNOWN_TOOL' && created?.decision === 'unknown') return { verdict: 'unknown', stage: 'create', plugin: 'core', reason: message, code }
  return { verdict: 'error', stage: 'create', plugin: 'core', reason: message, code }
}

function differs(old: Decision, now: Decision) {
  return old.verdict !== now.verdict || ((old.verdict === 'deny' || old.verdict === 'ask') && old.plugin !== now.plugin && now.verdict === 'deny')
}

/** the result a recorded outcome hands back to the pipeline in place of the body */
function replayedResult(recorded: Recorded | undefined, name: string): ToolResult {
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
  private readonly current = new Map<string, { name: string; result?: Recorded; nested?: NestedEntry[]; reached: boolean }>()
  /** questions the replay answered for a person: callId → the reason asked */
  private readonly asked = new Map<string, string>()
  /** the recorded world's files: absolute path → version (or absent) */
  private readonly disk = new Map<string, string>()
  private readonly report: ReplayReport
  private calls = 0
  private turn = 0
  private log = ''
  private session = ''
  private agentName?: string
  private agent?: Agent
  private missingAgent = false
  private answeredBy = new Map<string, string>()
  // keyed by names a log or a deployment chose: maps, never object keys (a tool named __proto__ or constructor)
  private readonly byTool = new Map<string, Tally>()
  private readonly byPlugin = new Map<string, { denied: number; asked: number }>()

  /** the deployment of the process being replayed: composed anew for each process the recording ran in */
  deployed!: Deployed
  /** processes replayed so far (each session record and each resume starts one) */
  private processes = 0
  // held once per deployment: reading ctx.tools builds a traced proxy each time, tens of µs a call
  private executor!: Executor
  /** @faber/plugin-approval's service, whose match() is what its rules and grants say */
  private approval?: { match?(query: unknown): Promise<{ decision: 'allow' | 'reject'; by: string } | undefined> }
  /** the fsRoot annotation of each tool, as the session's agent sees it */
  private roots = new Map<string, string | undefined>()

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

  /**
   * a recorded process starts (a session, or a resume of one): the first uses the deployment composed up front, each
   * later one a fresh composition, so what plugins held in memory is gone as it was, and what they kept in the store
   * (the in-memory copy) is still there. the session is announced under an id of the replay's own, so a plugin that
   * keeps per-session state in the store (fs-observation) starts from what this replay kept, never the recording's rows
   */
  async startProcess(resumed: boolean) {
    if (this.processes++ > 0) {
      await this.deployed.stop()
      this.attach(await this.composeOne())
    }
    this.agent = this.agentName === undefined ? undefined : this.deployed.agents.get(this.agentName)
    this.missingAgent = this.agentName !== undefined && !this.agent
    this.roots.clear()
    if (!this.missingAgent) this.deployed.ctx.emit('agent/session', { agent: this.agent, id: `faber-replay:${this.session}`, resumed })
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
        if (verdict) return { decision: verdict.decision, note: `decided by ${verdict.by}` }
        this.asked.set(query.callId, query.reason)
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

  private async replayNested(nested: NestedEntry, outer: Execution) {
    const within = this.within(outer, nested)
    await this.run(nested.callId, nested.name, nested.arguments, nested.result, undefined, { parent: outer.token }, within)
  }

  private within(outer: Execution, nested: NestedEntry): ReplayedCall['within'] {
    const code = (outer.arguments as { code?: unknown } | null)?.code
    const source = typeof code === 'string' && nested.line !== undefined ? code.split('\n')[nested.line - 1]?.trim() : undefined
    return { callId: outer.callId, line: nested.line, column: nested.column, source: source?.slice(0, 200) }
  }

  /** one call through the pipeline, compared with what was recorded */
  private async run(
    callId: string,
    name: string,
    args: unknown,
    recorded: Recorded | undefined,
    nested: NestedEntry[] | undefined,
    how: { parent?: Execution['token'] },
    within?: ReplayedCall['within'],
  ) {
    if (!recorded) {
      this.report.summary.unrecorded++
      return
    }
    const old = oldDecision(recorded, this.answeredBy.get(callId))
    const entry = { name, result: recorded, nested, reached: false }
    let now: Decision
    if (this.missingAgent) {
      now = { verdict: 'unknown', stage: 'create', plugin: 'core', reason: `the deployment defines no agent named "${this.agentName}"` }
    } else {
      this.current.set(callId, entry)
      let result: ToolResult
      try {
        result = await this.executor.execute({
          callId,
          name,
          arguments: args,
          signal: this.signal,
          ...(how.parent ? { parent: how.parent } : { agent: this.agent }),
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

  /** a user turn begins, as the agent loop tells it (the guards' repeat breaker and per-turn limits reset on it) */
  private turnStarts(turn: number) {
    emitEach(listenersFor(this.deployed.ctx, 'agent/turn', this.agent), [{ agent: this.agent, turn }], () => undefined)
  }

  /** the recorded world moves on: what a recorded read, write or edit saw of a file */
  private learn(name: string, args: unknown, recorded: Recorded) {
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
    const key = now.verdict === 'deny' ? 'newlyDenied' : now.verdict === 'allow' ? 'newlyAllowed' : now.verdict === 'ask' ? 'newlyAsked' : undefined
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
    if (now.verdict === 'allow' && (old.verdict === 'deny' || old.verdict === 'ask')) this.report.morePermissive = true
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
    const summary = {
      path,
      sessions: 0,
      directCalls: 0,
      unknownRecords: {} as Record<string, number>,
      truncated: undefined as ReplayReport['logs'][number]['truncated'],
    }
    const unknown = new Map<string, number>()
    let pending: DirectEntry[] = []
    const byId = new Map<string, DirectEntry>()
    const flush = async () => {
      for (const entry of pending) {
        this.turn = entry.turn
        if (entry.badJson !== undefined) {
          // the agent loop answered it without the pipeline: arguments that are not JSON are not a policy matter
          this.tally(entry.callId, entry.name, entry.badJson, { verdict: 'error' }, { verdict: 'error' }, undefined)
        } else {
          await this.run(entry.callId, entry.name, entry.arguments, entry.result, entry.nested, {})
        }
        summary.directCalls++
        this.calls++
        options.onProgress?.({ calls: this.calls, bytes: bytesBefore + bytes, totalBytes })
      }
      pending = []
      byId.clear()
      this.answeredBy.clear()
    }
    let lineNo = 0
    let bytes = 0
    let previous: string | undefined
    let sawSession = false
    const stream = createReadStream(path, { encoding: 'utf8' })
    const lines = createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY })
    const handle = async (raw: string, line: number, last: boolean) => {
      if (!raw.trim()) return
      const where = `${path}:${line}`
      if (raw.length > MAX_LINE) throw new ReplayInputError(`${where}: a line of ${raw.length} characters, longer than any record Faber writes`)
      let record: unknown
      try {
        record = JSON.parse(raw)
      } catch {
        // a crash mid-write leaves a torn last line: reported, left out; anywhere else it is corruption
        if (last) {
          summary.truncated = { line, bytes: Buffer.byteLength(raw) }
          return
        }
        throw new ReplayInputError(`${where}: not a log record (${raw.slice(0, 80)}); the log is corrupted before its last line`)
      }
      if (!isObject(record) || typeof record.type !== 'string')
        throw new ReplayInputError(`${where}: not a log record: a record is a JSON object with a "type"`)
      const type = record.type
      if (!KNOWN_RECORDS.has(type)) {
        const name = type.slice(0, 64)
        unknown.set(name, (unknown.get(name) ?? 0) + 1)
        return
      }
      if (type === 'session') {
        await flush()
        if (record.version !== LOG_VERSION) {
          const version = typeof record.version === 'number' ? record.version : JSON.stringify(record.version)
          throw new ReplayInputError(
            typeof record.version === 'number' && record.version < LOG_VERSION
              ? `${where}: this log was written at LOG_VERSION ${version}, which records no result values to hand back; faber replay reads LOG_VERSION ${LOG_VERSION}: record the session again with this Faber`
              : `${where}: this log was written at LOG_VERSION ${version}, which this Faber (LOG_VERSION ${LOG_VERSION}) does not know; replay it with the Faber that wrote it`,
          )
        }
        sawSession = true
        summary.sessions++
        this.session = typeof record.id === 'string' ? record.id : ''
        this.agentName = typeof record.agent === 'string' ? record.agent : undefined
        await this.startProcess(false)
        return
      }
      if (!sawSession) throw new ReplayInputError(`${where}: a "${type}" record before the log's session record; the log is not one Faber wrote`)
      switch (type) {
        case 'turn':
          await flush()
          if (!this.missingAgent) this.turnStarts(Number(record.turn) || 0)
          return
        case 'resume':
          await flush()
          await this.startProcess(true)
          return
        case 'model':
        case 'turn-end':
          await flush()
          return
        case 'call': {
          const call = record.call
          if (!isObject(call) || typeof call.id !== 'string' || typeof call.name !== 'string' || typeof call.arguments !== 'string') {
            throw new ReplayInputError(`${where}: a call record without call { id, name, arguments (JSON text) }`)
          }
          if (byId.has(call.id)) throw new ReplayInputError(`${where}: a second call with the id "${call.id}" in one step`)
          const entry: DirectEntry = { callId: call.id, name: call.name, turn: Number(record.turn) || 0, arguments: undefined, nested: [] }
          try {
            entry.arguments = call.arguments.trim() ? JSON.parse(call.arguments) : {}
          } catch {
            entry.badJson = call.arguments
          }
          pending.push(entry)
          byId.set(call.id, entry)
          return
        }
        case 'nested-call': {
          const outer = typeof record.outerCallId === 'string' ? byId.get(record.outerCallId) : undefined
          if (!outer || typeof record.callId !== 'string' || typeof record.name !== 'string') {
            throw new ReplayInputError(`${where}: a nested call whose run_code (outerCallId) is not a call of this step`)
          }
          // the call site the runtime reported (site: { line, column }, 1-based in the program as written), when it did
          const site = isObject(record.site) ? record.site : {}
          const line = typeof site.line === 'number' && Number.isSafeInteger(site.line) && site.line > 0 ? site.line : undefined
          const column = typeof site.column === 'number' && Number.isSafeInteger(site.column) ? site.column : undefined
          outer.nested.push({ callId: record.callId, name: record.name, arguments: record.arguments, line, column })
          return
        }
        case 'nested-result': {
          const outer = typeof record.outerCallId === 'string' ? byId.get(record.outerCallId) : undefined
          const nested = outer?.nested.find((n) => n.callId === record.callId && !n.result)
          // a nested call no code/call-start announced: its call record is the result itself
          if (!nested && outer && typeof record.callId === 'string' && typeof record.name === 'string') {
            outer.nested.push({ callId: record.callId, name: record.name, arguments: {}, result: recordedOutcome(record, where) })
            return
          }
          if (!nested) throw new ReplayInputError(`${where}: a nested result whose run_code (outerCallId) is not a call of this step`)
          nested.result = recordedOutcome(record, where)
          return
        }
        case 'result': {
          const entry = typeof record.callId === 'string' ? byId.get(record.callId) : undefined
          if (!entry) throw new ReplayInputError(`${where}: a result for a call this step did not make`)
          entry.result = recordedOutcome(record, where)
          return
        }
        case 'message': {
          const message = record.message
          if (isObject(message) && message.role === 'tool' && typeof message.toolCallId === 'string') {
            const entry = byId.get(message.toolCallId)
            if (entry?.result && typeof message.content === 'string') entry.result.content = message.content
          }
          return
        }
        case 'approval': {
          const detail = record.detail
          if (record.event === 'approval/decided' && typeof record.callId === 'string' && isObject(detail) && typeof detail.answeredBy === 'string') {
            this.answeredBy.set(record.callId, detail.answeredBy)
          }
          return
        }
      }
    }
    try {
      for await (const raw of lines) {
        lineNo++
        if (previous !== undefined) await handle(previous, lineNo - 1, false)
        previous = raw
        bytes += Buffer.byteLength(raw) + 1
      }
      if (previous !== undefined) await handle(previous, lineNo, true)
    } catch (error) {
      lines.close()
      stream.destroy()
      if (error instanceof ReplayInputError) throw error
      const code = (error as NodeJS.ErrnoException).code
      throw new ReplayInputError(`${path}: cannot read the log (${code ?? messageOf(error)})`)
    }
    if (!sawSession) throw new ReplayInputError(`${path}: no session record; is it a Faber session log (faber run/chat/demo --log)?`)
    await flush()
    summary.unknownRecords = sorted(unknown)
    if (!summary.truncated) delete summary.truncated
    this.report.logs.push(summary as ReplayReport['logs'][number])
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
  const spec: DeploymentSpec = {
    ...deployment,
    plugins: readOnly(deployment.plugins, store),
    agents: deployment.agents.map((agent) => ({ ...agent, plugins: readOnly(agent.plugins, store) })),
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

/** 1 when a call that was denied or asked would now run, else 0 */
export function replayExitCode(report: ReplayReport): 0 | 1 {
  return report.morePermissive ? 1 : 0
}
