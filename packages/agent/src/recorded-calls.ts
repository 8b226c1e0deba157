// the one reader of recorded calls: session log records turned into each step's direct calls, a run_code's nested
// calls under it in recorded order, and their outcomes. faber replay reads a log through it as a stream; resuming a
// session reads the records a SessionLog loaded. it checks what it reads (a forged record is an error naming its line)
// and keeps the log's names as data (maps, never object keys)

import { createReadStream } from 'node:fs'
import type { BridgeReply, CodeCheckpoint, JournalCall, Json } from '@faber/core'
import { messageOf } from '@faber/core'
import { type CallOutcome, LOG_VERSION } from './session-log.ts'

/** the oldest LOG_VERSION whose calls can be read back: 1 recorded no result values */
export const MIN_RECORDED_VERSION = 2

/** a result or nested-result record, checked: its outcome, and the text the model was shown */
export type RecordedOutcome = Omit<CallOutcome, 'durationMs'> & { content?: string }

/** how a call's approval question was answered in the recording (its approval/decided record) */
export interface RecordedAnswer {
  /** the answerer: a plugin, or approval-rules / policy / approval-store */
  by: string
  /** allowed, rejected, timed-out, … */
  outcome?: string
  /** what the answer asked to remember, and the grant it made */
  remember?: 'session' | 'always'
  grant?: string
}

export interface RecordedNestedCall {
  callId: string
  name: string
  arguments: unknown
  /** the call site the runtime reported: 1-based in the program as written */
  site?: { line: number; column?: number }
  /** absent: the process stopped before the call finished */
  outcome?: RecordedOutcome
  /** who answered its approval question, when one was asked */
  answeredBy?: string
  /** and how */
  answer?: RecordedAnswer
}

/** one direct call of a step */
export interface RecordedCall {
  turn: number
  step: number
  callId: string
  name: string
  /** the parsed arguments ({} for empty text) */
  arguments: unknown
  /** the arguments' text, when it was not JSON (the agent loop answered the call without the pipeline) */
  badJson?: string
  /** the conversation it came in on, when one agent served several (an MCP session) */
  session?: string
  /** a run_code's calls, in recorded order */
  nested: RecordedNestedCall[]
  /** absent: the process stopped before the call finished */
  outcome?: RecordedOutcome
  answeredBy?: string
  answer?: RecordedAnswer
  /** a run_code checkpointed while it waited on a person: its journal as the log last has it */
  checkpoint?: CodeCheckpoint
}

/** a run_code program checkpointed in a log, with no result recorded: what a new process runs it again from */
export interface RecordedCheckpoint {
  outerCallId: string
  turn: number
  name: string
  /** its arguments, parsed */
  arguments: unknown
  session?: string
  checkpoint: CodeCheckpoint
  /**
   * its calls recorded as running whose body may have started: running at the checkpoint but not waiting on an approval,
   * or marked started since (a mark is synced before the body runs), with no reply. a call recorded running with neither
   * never started: it is made again when the program reaches it. a program with any unsure call is not run again
   */
  unsure: JournalCall[]
}

export type RecordedEvent =
  | { kind: 'session'; id: string; agent?: string; version: number; line: number }
  | { kind: 'resume'; line: number }
  | { kind: 'turn'; turn: number; line: number }
  /** a step's direct calls, once the step is complete (a model record, a turn's end, a new turn or process, the log's end) */
  | { kind: 'step'; calls: RecordedCall[] }
  /** a record type this reader does not interpret (a later writer's, say): for whoever wants it */
  | { kind: 'other'; type: string; record: Record<string, unknown>; line: number }

export class RecordedCallsError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'RecordedCallsError'
  }
}

/** the record types whose calls this reader assembles; any other type comes out as `other` */
const READ = new Set([
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
  'checkpoint',
  'journal',
])

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

const sameCall = (a: JournalCall, b: JournalCall | undefined) =>
  b !== undefined && a.name === b.name && a.arguments === b.arguments && JSON.stringify(a.reply) === JSON.stringify(b.reply)

const stageOf = (value: unknown) => (isObject(value) ? { stage: String(value.stage), plugin: String(value.plugin) } : undefined)

function outcomeOf(record: Record<string, unknown>, where: string): RecordedOutcome {
  if (typeof record.isError !== 'boolean') throw new RecordedCallsError(`${where}: a result without isError (true or false); the log is not one Faber wrote`)
  if (!record.isError && !('value' in record))
    throw new RecordedCallsError(`${where}: a successful result without its value; the log is not one Faber ${LOG_VERSION} wrote`)
  const trace = Array.isArray(record.trace)
    ? record.trace.filter(isObject).map((s) => ({ stage: String(s.stage), decision: String(s.decision), by: typeof s.by === 'string' ? s.by : undefined }))
    : undefined
  return {
    isError: record.isError,
    value: record.value as Json,
    code: typeof record.code === 'string' ? record.code : undefined,
    toolCode: typeof record.toolCode === 'string' ? record.toolCode : undefined,
    deniedBy: stageOf(record.deniedBy),
    withheldBy: stageOf(record.withheldBy),
    trace,
    content: typeof record.content === 'string' ? record.content : undefined,
  }
}

/** refuses a log version whose calls cannot be read back, naming it */
function checkVersion(version: unknown, where: string, oldest: number) {
  if (typeof version === 'number' && version >= oldest && version <= LOG_VERSION) return version
  const shown = typeof version === 'number' ? version : JSON.stringify(version)
  throw new RecordedCallsError(
    typeof version === 'number' && version < MIN_RECORDED_VERSION
      ? `${where}: this log was written at LOG_VERSION ${shown}, which records no result values to hand back; this Faber reads LOG_VERSION ${MIN_RECORDED_VERSION}${LOG_VERSION > MIN_RECORDED_VERSION ? ` to ${LOG_VERSION}` : ''}: record the session again with this Faber`
      : `${where}: this log was written at LOG_VERSION ${shown}, which this Faber (LOG_VERSION ${LOG_VERSION}) does not know; read it with the Faber that wrote it`,
  )
}

/** assembles recorded calls from records pushed one at a time, in the log's order */
export class RecordedCallReader {
  private pending: RecordedCall[] = []
  private readonly byId = new Map<string, RecordedCall>()
  /** approval answers of this step, by call id (direct or nested) */
  private readonly answers = new Map<string, RecordedAnswer>()
  /** per checkpointed run_code: its nested calls whose body may have started (running at the checkpoint, or marked since) */
  private readonly started = new Map<string, Set<string>>()
  private sawSession = false

  /** `oldest`: the oldest LOG_VERSION read (default 2: the first with result values, which a replay hands back) */
  constructor(
    private readonly path = 'session log',
    private readonly oldest = MIN_RECORDED_VERSION,
  ) {}

  /** the events one record completes; throws RecordedCallsError naming the line for a record Faber would not write */
  push(record: unknown, line: number): RecordedEvent[] {
    const where = `${this.path}:${line}`
    if (!isObject(record) || typeof record.type !== 'string')
      throw new RecordedCallsError(`${where}: not a log record: a record is a JSON object with a "type"`)
    const type = record.type
    if (!READ.has(type)) return [{ kind: 'other', type, record, line }]
    if (type === 'session') {
      const events = this.flush()
      const version = checkVersion(record.version, where, this.oldest)
      this.sawSession = true
      events.push({
        kind: 'session',
        id: typeof record.id === 'string' ? record.id : '',
        agent: typeof record.agent === 'string' ? record.agent : undefined,
        version,
        line,
      })
      return events
    }
    if (!this.sawSession) throw new RecordedCallsError(`${where}: a "${type}" record before the log's session record; the log is not one Faber wrote`)
    switch (type) {
      case 'turn': {
        const events = this.flush()
        events.push({ kind: 'turn', turn: Number(record.turn) || 0, line })
        return events
      }
      case 'resume': {
        const events = this.flush()
        events.push({ kind: 'resume', line })
        return events
      }
      case 'model':
      case 'turn-end':
        return this.flush()
      case 'call': {
        const call = record.call
        if (!isObject(call) || typeof call.id !== 'string' || typeof call.name !== 'string' || typeof call.arguments !== 'string') {
          throw new RecordedCallsError(`${where}: a call record without call { id, name, arguments (JSON text) }`)
        }
        if (this.byId.has(call.id)) throw new RecordedCallsError(`${where}: a second call with the id "${call.id}" in one step`)
        const entry: RecordedCall = {
          turn: Number(record.turn) || 0,
          step: Number(record.step) || 0,
          callId: call.id,
          name: call.name,
          arguments: undefined,
          nested: [],
          ...(typeof record.session === 'string' ? { session: record.session } : {}),
        }
        try {
          entry.arguments = call.arguments.trim() ? JSON.parse(call.arguments) : {}
        } catch {
          entry.badJson = call.arguments
        }
        this.pending.push(entry)
        this.byId.set(call.id, entry)
        return []
      }
      case 'nested-call': {
        const outer = typeof record.outerCallId === 'string' ? this.byId.get(record.outerCallId) : undefined
        if (!outer || typeof record.callId !== 'string' || typeof record.name !== 'string') {
          throw new RecordedCallsError(`${where}: a nested call whose run_code (outerCallId) is not a call of this step`)
        }
        const site = isObject(record.site) ? record.site : {}
        const siteLine = typeof site.line === 'number' && Number.isSafeInteger(site.line) && site.line > 0 ? site.line : undefined
        const column = typeof site.column === 'number' && Number.isSafeInteger(site.column) ? site.column : undefined
        outer.nested.push({
          callId: record.callId,
          name: record.name,
          arguments: record.arguments,
          ...(siteLine !== undefined ? { site: { line: siteLine, ...(column !== undefined ? { column } : {}) } } : {}),
        })
        return []
      }
      case 'nested-result': {
        const outer = typeof record.outerCallId === 'string' ? this.byId.get(record.outerCallId) : undefined
        const nested = outer?.nested.find((n) => n.callId === record.callId && !n.outcome)
        // a nested call no code/call-start announced: its result record is the call itself
        if (!nested && outer && typeof record.callId === 'string' && typeof record.name === 'string') {
          outer.nested.push({ callId: record.callId, name: record.name, arguments: {}, outcome: outcomeOf(record, where) })
          return []
        }
        if (!nested) throw new RecordedCallsError(`${where}: a nested result whose run_code (outerCallId) is not a call of this step`)
        nested.outcome = outcomeOf(record, where)
        return []
      }
      case 'result': {
        const entry = typeof record.callId === 'string' ? this.byId.get(record.callId) : undefined
        if (!entry) throw new RecordedCallsError(`${where}: a result for a call this step did not make`)
        entry.outcome = outcomeOf(record, where)
        return []
      }
      case 'message': {
        const message = record.message
        if (isObject(message) && message.role === 'tool' && typeof message.toolCallId === 'string') {
          const entry = this.byId.get(message.toolCallId)
          if (entry?.outcome && typeof message.content === 'string') entry.outcome.content = message.content
        }
        return []
      }
      case 'approval': {
        const detail = record.detail
        if (record.event === 'approval/decided' && typeof record.callId === 'string' && isObject(detail) && typeof detail.answeredBy === 'string') {
          const { outcome, remember, grant } = detail
          this.answers.set(record.callId, {
            by: detail.answeredBy,
            ...(typeof outcome === 'string' ? { outcome } : {}),
            ...(remember === 'session' || remember === 'always' ? { remember } : {}),
            ...(typeof grant === 'string' ? { grant } : {}),
          })
        }
        return []
      }
      case 'checkpoint': {
        const call = this.checkpointed(record, where)
        if (!Array.isArray(record.calls) || !Array.isArray(record.values) || typeof record.sequence !== 'number') {
          throw new RecordedCallsError(`${where}: a checkpoint without its journal (calls, values, sequence)`)
        }
        const calls = record.calls.filter(isObject).map((c) => ({ ...c }) as unknown as JournalCall)
        // a program checkpointed again holds every settled call of its journal, as it was: one that drops or changes
        // one would have a new run make that call again
        const lost = call.checkpoint?.calls.findIndex((c, i) => c.reply !== undefined && !sameCall(c, calls[i])) ?? -1
        if (lost >= 0) {
          throw new RecordedCallsError(
            `${where}: a checkpoint of run_code "${call.callId}" that drops or changes its call ${lost + 1}, settled in its earlier checkpoint; the log is not one Faber wrote`,
          )
        }
        call.checkpoint = { calls, values: record.values.filter((v): v is number => typeof v === 'number'), sequence: record.sequence }
        const running = Array.isArray(record.running) ? record.running.filter((id): id is string => typeof id === 'string') : []
        this.started.set(call.callId, new Set(running))
        return []
      }
      case 'journal': {
        const journal = this.checkpointed(record, where).checkpoint
        if (!journal) throw new RecordedCallsError(`${where}: a journal record before its run_code's checkpoint`)
        // one by one: a list spread into push() overflows the stack past ~100,000
        if (Array.isArray(record.values)) for (const v of record.values) if (typeof v === 'number') journal.values.push(v)
        if (typeof record.started === 'string') this.started.get(record.outerCallId as string)?.add(record.started)
        const index = record.index
        if (typeof index !== 'number' || !Number.isSafeInteger(index) || index < 0 || index > journal.calls.length) return []
        if (isObject(record.call)) {
          const call = { ...record.call } as unknown as JournalCall
          journal.calls[index] = call
          const id = Number(call.callId?.slice(call.callId.lastIndexOf('/') + 1))
          if (Number.isSafeInteger(id)) journal.sequence = Math.max(journal.sequence, id)
        } else if (isObject(record.reply) && journal.calls[index]) journal.calls[index].reply = record.reply as unknown as BridgeReply
        return []
      }
      default:
        // retry: nothing of the calls
        return []
    }
  }

  /** the events the end of the log completes; throws when the log held no session */
  end(): RecordedEvent[] {
    if (!this.sawSession) throw new RecordedCallsError(`${this.path}: no session record; is it a Faber session log (faber run/chat/demo --log)?`)
    return this.flush(true)
  }

  /** the run_code a checkpoint or journal record belongs to: a call of this step not yet finished */
  private checkpointed(record: Record<string, unknown>, where: string): RecordedCall {
    const call = typeof record.outerCallId === 'string' ? this.byId.get(record.outerCallId) : undefined
    if (!call || call.outcome) throw new RecordedCallsError(`${where}: a ${record.type} whose run_code (outerCallId) is not a running call of this step`)
    return call
  }

  /**
   * the step so far, complete. a program checkpointed while it waited on a person, and not finished, is held back
   * until the log's end: it runs again in the process that resumes the session, whose records go on after the resume
   */
  private flush(final = false): RecordedEvent[] {
    if (!this.pending.length) return []
    const waiting = (call: RecordedCall) => !final && call.checkpoint !== undefined && !call.outcome
    const calls = this.pending.filter((call) => !waiting(call))
    const kept = this.pending.filter(waiting)
    for (const call of calls) {
      for (const made of [call, ...call.nested]) {
        const answer = this.answers.get(made.callId)
        made.answeredBy = answer?.by
        if (answer) made.answer = answer
      }
    }
    this.pending = kept
    this.byId.clear()
    for (const call of kept) this.byId.set(call.callId, call)
    if (!kept.length) this.answers.clear()
    return calls.length ? [{ kind: 'step', calls }] : []
  }

  /** a checkpointed call's journal calls whose body may have run: no reply, and running at the checkpoint or marked started */
  unsure(call: RecordedCall): JournalCall[] {
    const started = this.started.get(call.callId)
    return (call.checkpoint?.calls ?? []).filter((c) => !c.reply && (!c.callId || started?.has(c.callId) === true))
  }
}

/** the checkpointed run_code programs of a log that have no result yet: the journal of each, as the log last has it */
export function checkpointsOf(records: readonly unknown[], path?: string): Map<string, RecordedCheckpoint> {
  // a log of any version is continued; one before LOG_VERSION 3 has no checkpoints
  const reader = new RecordedCallReader(path, 1)
  const found = new Map<string, RecordedCheckpoint>()
  const events = [...records.flatMap((record, index) => reader.push(record, index + 1)), ...reader.end()]
  for (const event of events) {
    if (event.kind !== 'step') continue
    for (const call of event.calls) {
      if (!call.checkpoint || call.outcome) continue
      const { callId, turn, name, arguments: args, session, checkpoint } = call
      found.set(callId, { outerCallId: callId, turn, name, arguments: args, session, checkpoint, unsure: reader.unsure(call) })
    }
  }
  return found
}

/** the recorded calls of records already parsed (a SessionLog's `records`) */
export function recordedCalls(records: readonly unknown[], path?: string): RecordedEvent[] {
  const reader = new RecordedCallReader(path)
  const events = records.flatMap((record, index) => reader.push(record, index + 1))
  return [...events, ...reader.end()]
}

export interface StreamOptions {
  /** a line longer than this many characters is refused (default 256 Mi) */
  maxLine?: number
  /** told the bytes read so far after each line */
  onBytes?(bytes: number): void
  /** told a last line cut short by a crash, which is left out */
  onTruncated?(torn: { line: number; bytes: number }): void
}

/**
 * the lines of a text stream (a line break is \n, or \r\n), refusing a line longer than `maxLine` as it is gathered:
 * node's readline gathers a line whole first, and one longer than the longest string v8 makes threw where no caller
 * could catch it
 */
async function* linesOf(stream: AsyncIterable<string>, maxLine: number, tooLong: () => Error): AsyncGenerator<string> {
  let pending = ''
  for await (const chunk of stream) {
    let start = 0
    for (let end = chunk.indexOf('\n'); end >= 0; end = chunk.indexOf('\n', start)) {
      const line = pending + chunk.slice(start, end)
      pending = ''
      start = end + 1
      if (line.length > maxLine) throw tooLong()
      yield line.endsWith('\r') ? line.slice(0, -1) : line
    }
    pending += chunk.slice(start)
    if (pending.length > maxLine) throw tooLong()
  }
  if (pending) yield pending
}

/**
 * the recorded calls of a log file, read as a stream (a log of any size in bounded memory but for its longest line).
 * a torn last line is reported through onTruncated and left out; a broken line before it is an error naming it
 */
export async function* streamRecordedCalls(path: string, options: StreamOptions = {}): AsyncGenerator<RecordedEvent> {
  const maxLine = options.maxLine ?? 256 * 1024 * 1024
  const reader = new RecordedCallReader(path)
  const stream = createReadStream(path, { encoding: 'utf8' })
  const tooLong = (line: number) => new RecordedCallsError(`${path}:${line}: a line of more than ${maxLine} characters, longer than any record Faber writes`)
  const parse = (raw: string, line: number, last: boolean): RecordedEvent[] => {
    if (!raw.trim()) return []
    const where = `${path}:${line}`
    if (raw.length > maxLine) throw tooLong(line)
    let record: unknown
    try {
      record = JSON.parse(raw)
    } catch {
      // a crash mid-write leaves a torn last line: reported, left out; anywhere else it is corruption
      if (last) {
        options.onTruncated?.({ line, bytes: Buffer.byteLength(raw) })
        return []
      }
      throw new RecordedCallsError(`${where}: not a log record (${raw.slice(0, 80)}); the log is corrupted before its last line`)
    }
    return reader.push(record, line)
  }
  let lineNo = 0
  let bytes = 0
  let previous: string | undefined
  try {
    for await (const raw of linesOf(stream, maxLine, () => tooLong(lineNo + 1))) {
      lineNo++
      if (previous !== undefined) yield* parse(previous, lineNo - 1, false)
      previous = raw
      bytes += Buffer.byteLength(raw) + 1
      options.onBytes?.(bytes)
    }
    if (previous !== undefined) yield* parse(previous, lineNo, true)
  } catch (error) {
    if (error instanceof RecordedCallsError) throw error
    const code = (error as NodeJS.ErrnoException).code
    throw new RecordedCallsError(`${path}: cannot read the log (${code ?? messageOf(error)})`)
  } finally {
    stream.destroy()
  }
  yield* reader.end()
}
