// the session log: one JSON record per line, appended durably (written as it happens, fsynced at least at the end
// of every step), reloadable to continue a session. a crash mid-write leaves a truncated last line: it is reported
// and cut off on open, never fatal. a broken line anywhere else is corruption and refuses to load.

import { type FileHandle, open, readFile } from 'node:fs/promises'
import type { BridgeReply, CallSite, CodeCheckpoint, JournalCall, Json } from '@faber/core'
import type { Message, ToolCall, Usage } from './model.ts'
import { lockSessionLog, type SessionLock } from './session-lock.ts'

/**
 * 3: a run_code program checkpointed while it waits on a person records its journal (`checkpoint`, then `journal`).
 * 2: a success's result records carry its JSON value (what a replay hands the pipeline back); 1 recorded none
 */
export const LOG_VERSION = 3

interface Base {
  /** ms since the epoch */
  at: number
}

export interface StageEntry {
  stage: string
  decision: string
  by?: string
  reason?: string
}

export interface CallOutcome {
  isError: boolean
  /** a success's value (since LOG_VERSION 2) */
  value?: Json
  code?: string
  toolCode?: string
  deniedBy?: { stage: string; plugin: string }
  /** RESULT_WITHHELD: the body ran, and this participant kept its result from the model */
  withheldBy?: { stage: string; plugin: string }
  trace?: StageEntry[]
  durationMs: number
}

export type LogRecord = Base &
  (
    | { type: 'session'; version: number; id: string; agent?: string; model: string }
    | { type: 'resume'; turns: number; skipped?: TruncatedLine }
    | { type: 'turn'; turn: number }
    | { type: 'message'; turn: number; message: Message }
    | { type: 'model'; turn: number; step: number; model: string; usage?: Usage; finishReason?: string; durationMs: number }
    | { type: 'call'; turn: number; step: number; call: ToolCall; mode: 'parallel' | 'exclusive' | 'none'; session?: string }
    | ({ type: 'result'; turn: number; callId: string; name: string } & CallOutcome)
    | { type: 'nested-call'; turn: number; outerCallId: string; callId: string; name: string; arguments: unknown; site?: CallSite }
    | ({ type: 'nested-result'; turn: number; outerCallId: string; callId: string; name: string; content: string } & CallOutcome)
    | { type: 'approval'; turn: number; event: string; callId?: string; tool?: string; detail: Record<string, unknown> }
    | { type: 'turn-end'; turn: number; reason: string; steps: number; usage?: Usage; error?: string; partial?: string }
    | { type: 'retry'; turn: number; step: number; attempt: number; maxAttempts: number; delayMs: number; reason: string; status?: number }
    | ({ type: 'checkpoint'; turn: number; outerCallId: string; running?: string[] } & CodeCheckpoint)
    | {
        type: 'journal'
        turn: number
        outerCallId: string
        index?: number
        call?: JournalCall
        reply?: BridgeReply
        values?: number[]
        /** a nested call's body is about to run (written and synced first) */
        started?: string
      }
  )

export type LogRecordOf<T extends LogRecord['type']> = Extract<LogRecord, { type: T }>

/** a record without its timestamp, as callers append it */
export type NewRecord = LogRecord extends infer R ? (R extends LogRecord ? Omit<R, 'at'> : never) : never

export interface TruncatedLine {
  /** 1-based line number */
  line: number
  bytes: number
  text: string
}

export class SessionLogError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'SessionLogError'
  }
}

export interface ParsedLog {
  records: LogRecord[]
  /** a last line cut short by a crash, left out */
  truncated?: TruncatedLine
  /** the last record is complete but its newline is missing */
  missingNewline: boolean
  /** byte length of what is kept */
  validBytes: number
}

function parseRecord(raw: string): LogRecord | undefined {
  try {
    const record = JSON.parse(raw)
    if (typeof record === 'object' && record !== null && typeof record.type === 'string') return record
  } catch {}
}

export function parseSessionLog(input: string | Buffer, path = 'session log'): ParsedLog {
  // offsets are counted in the file's own bytes: bytes that are not UTF-8 decode to text of another length
  const bytes = typeof input === 'string' ? Buffer.from(input) : input
  const text = typeof input === 'string' ? input : input.toString('utf8')
  const lines = text.split('\n')
  // appends are sequential, so a torn write can only be the segment after the last newline
  const tail = lines.pop()!
  const records: LogRecord[] = []
  lines.forEach((raw, index) => {
    if (!raw.trim()) return
    const record = parseRecord(raw)
    if (!record) throw new SessionLogError(`${path}:${index + 1}: not a log record (${raw.slice(0, 80)}); the log is corrupted before its last line`)
    records.push(record)
  })
  const kept = bytes.lastIndexOf(0x0a) + 1
  if (!tail.trim()) return { records, missingNewline: false, validBytes: kept }
  const record = parseRecord(tail)
  if (record) return { records: [...records, record], missingNewline: true, validBytes: bytes.length }
  return { records, truncated: { line: lines.length + 1, bytes: bytes.length - kept, text: tail.slice(0, 200) }, missingNewline: false, validBytes: kept }
}

/** the conversation a log holds, with any call left without a result (a crash mid-step) answered as interrupted */
export function conversationOf(records: readonly LogRecord[]): { messages: Message[]; dangling: Extract<Message, { role: 'tool' }>[] } {
  const messages: Message[] = []
  for (const record of records) if (record.type === 'message') messages.push(record.message)
  const answered = new Set(messages.flatMap((m) => (m.role === 'tool' ? [m.toolCallId] : [])))
  const dangling: Extract<Message, { role: 'tool' }>[] = []
  for (const message of messages) {
    if (message.role !== 'assistant') continue
    for (const call of message.toolCalls ?? []) {
      if (answered.has(call.id)) continue
      dangling.push({
        role: 'tool',
        toolCallId: call.id,
        name: call.name,
        content: `Error: the session stopped before the result of "${call.name}" was recorded; it may or may not have run. Check before repeating it.`,
        isError: true,
      })
    }
  }
  return { messages, dangling }
}

export class SessionLog {
  private chain: Promise<unknown> = Promise.resolve()
  private failure?: unknown
  private closed = false

  private constructor(
    readonly path: string,
    private handle: FileHandle,
    /** records already in the file when it was opened */
    readonly records: readonly LogRecord[],
    readonly truncated: TruncatedLine | undefined,
    private lock: SessionLock,
  ) {}

  /**
   * opens a log for appending, loading what it already holds; a truncated last line is reported and cut off. one
   * process at a time: while another has it open (continuing its session, running its waiting program again), this
   * rejects, naming that process, and reads or writes nothing
   */
  static async open(path: string): Promise<SessionLog> {
    const lock = await lockSessionLog(path)
    if (!('release' in lock)) {
      const { heldBy } = lock
      throw new SessionLogError(
        heldBy === process.pid
          ? `${path}: this process has the log open already (another SessionLog on it is still open); close it first`
          : `${path}: another process${heldBy ? ` (pid ${heldBy})` : ''} has this session log open: it is continuing the session, and would run any program the session left waiting a second time. Wait for it to end (or stop it), then continue the session`,
      )
    }
    try {
      let bytes = Buffer.alloc(0)
      try {
        bytes = await readFile(path)
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
      }
      const parsed = parseSessionLog(bytes, path)
      const handle = await open(path, 'a')
      if (parsed.truncated) await handle.truncate(parsed.validBytes)
      if (parsed.missingNewline) await handle.write('\n')
      if (parsed.truncated || parsed.missingNewline) await handle.sync()
      return new SessionLog(path, handle, parsed.records, parsed.truncated, lock)
    } catch (error) {
      await lock.release()
      throw error
    }
  }

  /** true when the file held a session already */
  get resumed() {
    return this.records.some((r) => r.type === 'session')
  }

  append(record: NewRecord) {
    if (this.closed) throw new SessionLogError(`${this.path}: the log is closed`)
    const line = `${JSON.stringify({ ...record, at: Date.now() })}\n`
    this.chain = this.chain.then(
      () => this.handle.write(line),
      () => {},
    )
    this.chain.catch((error) => {
      this.failure ??= error
    })
  }

  /** waits for every appended record to be written and synced to disk */
  async flush() {
    await this.chain.catch(() => {})
    if (this.failure) throw new SessionLogError(`${this.path}: writing the log failed: ${(this.failure as Error).message ?? this.failure}`)
    await this.handle.sync()
  }

  async close() {
    if (this.closed) return
    try {
      await this.flush()
    } finally {
      this.closed = true
      try {
        await this.handle.close()
      } finally {
        await this.lock.release()
      }
    }
  }
}
