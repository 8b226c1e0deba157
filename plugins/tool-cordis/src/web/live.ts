// the live feed behind the web view's stream: calls as they reach policy and as they end (from the inspector's
// trace), the source of every run_code program, approvals while they wait (from the approval service's audit
// events, so any answerer's requests show) and whether the web answerer holds them, and a signal when the
// plugin tree or the tool set changed. it exists only while a page can be served, so it costs nothing otherwise.

import { type Execution, type ExecutionToken, type Json, RUN_CODE } from '@faber/core'
import type { ApprovalAsked, ApprovalDecided, WebAnswerer } from '@faber/plugin-approval'
import type { Context } from 'cordis'
import type Inspector from '../inspector.ts'
import { type CallRecord, preview } from '../trace.ts'

const ARGUMENTS_PREVIEW = 2000
const MAX_PROGRAM = 200_000
const MAX_PROGRAMS = 200
// all the programs kept, together: the snapshot every page that connects receives holds them
const MAX_PROGRAM_CHARS = 4_000_000
const MAX_REASON = 2000

/** `text` kept to `max` characters, with a line saying what was cut; `marker` starts that line (`// …` keeps a program a program) */
function cutText(text: string, max: number, what: string, marker = '…') {
  return text.length > max ? `${text.slice(0, max)}\n${marker} (${what ? `${what} ` : ''}cut: ${text.length - max} more characters)` : text
}

/** a call that reached policy and has not ended: the fields of its record known so far */
export type LiveStart = Pick<CallRecord, 'callId' | 'name' | 'agent' | 'nested' | 'outerCallId' | 'site' | 'rootCallId' | 'arguments' | 'startedAt'>

/** a run_code program: key is `<agent>/<callId>`, agent empty for the global layer */
export interface LiveProgram {
  key: string
  callId: string
  agent: string | null
  description: string
  code: string
}

export interface LiveApproval {
  id: string
  tool: string
  agent: string | null
  callId: string
  reason: string
  nested: boolean
  program?: string
  arguments: string
  askedAt: number
  /** held by the web answerer: the page may answer it */
  answerable: boolean
}

export interface LiveSnapshot {
  calls: CallRecord[]
  running: LiveStart[]
  programs: LiveProgram[]
  approvals: LiveApproval[]
}

export type LiveEvent =
  | { type: 'start'; call: LiveStart; program?: LiveProgram }
  | { type: 'call'; call: CallRecord }
  | { type: 'approval'; approval: LiveApproval }
  | { type: 'answerable'; id: string; answerable: boolean }
  | { type: 'decided'; id: string; outcome: string; answeredBy: string; note?: string }
  | { type: 'report' }

export function programKey(agent: string | null, callId: string) {
  return `${agent ?? ''}/${callId}`
}

function programOf(exec: Execution): LiveProgram | undefined {
  if (exec.name !== RUN_CODE || exec.parent) return
  const args = exec.arguments as { code?: Json; description?: Json } | null
  if (typeof args?.code !== 'string') return
  const agent = exec.agent?.name ?? null
  const code = cutText(args.code, MAX_PROGRAM, '', '// …')
  const description = typeof args.description === 'string' ? cutText(args.description, MAX_REASON, 'description') : ''
  return { key: programKey(agent, exec.callId), callId: exec.callId, agent, description, code }
}

export class LiveFeed {
  private running = new Map<ExecutionToken, LiveStart>()
  private programs = new Map<string, LiveProgram>()
  private programChars = 0
  private approvals = new Map<string, LiveApproval>()
  private subscribers = new Set<(event: LiveEvent) => void>()
  private disposers: (() => unknown)[] = []
  private unwatch?: () => unknown
  private changed?: NodeJS.Timeout

  constructor(
    private ctx: Context,
    private inspector: Inspector,
  ) {
    this.disposers.push(
      inspector.observe({
        start: (exec, startedAt) => this.start(exec, startedAt),
        record: (record, exec) => {
          this.running.delete(exec.token)
          this.emit({ type: 'call', call: record })
        },
      }),
      ctx.on('approval/asked', (event) => this.asked(event)),
      ctx.on('approval/decided', (event) => this.decided(event)),
      ctx.on('tools/changed', () => this.reportChanged()),
      ctx.on('internal/fork', () => this.reportChanged()),
      ctx.on('internal/service', (name) => {
        if (name === 'approvalWeb') this.bindAnswerer()
        this.reportChanged()
      }),
    )
    this.bindAnswerer()
  }

  /** the web answerer, when the deployment loaded one */
  answerer(): WebAnswerer | undefined {
    return this.ctx.get('approvalWeb') ?? undefined
  }

  private bindAnswerer() {
    this.unwatch?.()
    this.unwatch = this.answerer()?.watch((change) => {
      const id = change.kind === 'waiting' ? change.query.id : change.id
      const approval = this.approvals.get(id)
      if (!approval) return
      approval.answerable = change.kind === 'waiting'
      this.emit({ type: 'answerable', id, answerable: approval.answerable })
    })
  }

  private start(exec: Execution, startedAt: number) {
    const call: LiveStart = {
      callId: exec.callId,
      name: exec.name,
      agent: exec.agent?.name ?? null,
      nested: exec.parent !== undefined,
      rootCallId: exec.rootCallId,
      arguments: exec.name === RUN_CODE ? '' : preview(exec.arguments, ARGUMENTS_PREVIEW),
      startedAt,
    }
    if (exec.parent) call.outerCallId = exec.parent.callId
    if (exec.site) call.site = { ...exec.site }
    this.running.set(exec.token, call)
    const program = programOf(exec)
    if (program) {
      const known = this.programs.get(program.key)
      if (known) this.programChars -= known.code.length
      this.programs.set(program.key, program)
      this.programChars += program.code.length
      // the oldest go first, by count and by their total size
      for (const [key, old] of this.programs) {
        if (this.programs.size <= 1 || (this.programs.size <= MAX_PROGRAMS && this.programChars <= MAX_PROGRAM_CHARS)) break
        this.programs.delete(key)
        this.programChars -= old.code.length
      }
    }
    this.emit(program ? { type: 'start', call, program } : { type: 'start', call })
  }

  private asked(event: ApprovalAsked) {
    const held = new Set(
      this.answerer()
        ?.pending()
        .map((query) => query.id),
    )
    const approval: LiveApproval = {
      id: event.id,
      tool: event.tool,
      agent: event.agent?.name ?? null,
      callId: event.callId,
      reason: cutText(event.reason, MAX_REASON, 'reason'),
      nested: event.nested,
      arguments: preview(event.arguments, ARGUMENTS_PREVIEW),
      askedAt: Date.now(),
      answerable: held.has(event.id),
    }
    if (event.program !== undefined) approval.program = cutText(event.program, MAX_PROGRAM, 'program')
    this.approvals.set(event.id, approval)
    this.emit({ type: 'approval', approval })
  }

  private decided(event: ApprovalDecided) {
    this.approvals.delete(event.id)
    const decided: LiveEvent = { type: 'decided', id: event.id, outcome: event.outcome, answeredBy: event.answeredBy }
    if (event.note) decided.note = event.note
    this.emit(decided)
  }

  private reportChanged() {
    // plugin loads and tool registrations come in bursts: one signal per burst
    if (this.changed) return
    this.changed = setTimeout(() => {
      this.changed = undefined
      this.emit({ type: 'report' })
    }, 100)
    this.changed.unref?.()
  }

  private emit(event: LiveEvent) {
    for (const subscriber of this.subscribers) {
      try {
        subscriber(event)
      } catch {}
    }
  }

  snapshot(): LiveSnapshot {
    return {
      calls: this.inspector.report().calls,
      running: [...this.running.values()],
      programs: [...this.programs.values()],
      approvals: [...this.approvals.values()],
    }
  }

  subscribe(subscriber: (event: LiveEvent) => void): () => void {
    this.subscribers.add(subscriber)
    return () => this.subscribers.delete(subscriber)
  }

  dispose() {
    clearTimeout(this.changed)
    this.unwatch?.()
    for (const dispose of this.disposers.splice(0)) dispose()
    this.subscribers.clear()
  }
}
