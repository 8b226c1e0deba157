// a run_code program that waits on a person for longer than checkpointAfterMs gives its sandbox unit back (its run is
// ended), and once the person answered it is run again from the start: each nested call it already made is answered
// from this journal (no pipeline, no body: a body that completed never runs twice), the call it waited on gets the
// answer it was waiting for, and from there on it runs live. a program that takes another path on the second run is
// stopped before any new call starts. once checkpointed, the journal is durable: what it holds, and every change after,
// goes to `code/journal` listeners (the agent's session log), so a new process can run the program again from it.

import type { Agent } from './agent.ts'
import type { BridgeReply, RecordedValues } from './code-runtime.ts'
import type { Execution } from './tool.ts'

/** a nested call as a durable journal holds it; no reply: it was still running when written */
export interface JournalCall {
  /** the nested call's id, `${outerCallId}/${n}` */
  callId?: string
  name: string
  /** the JSON text the program passed */
  arguments: string
  reply?: BridgeReply
}

/** a checkpointed program's journal: what a run of it again is answered from */
export interface CodeCheckpoint {
  calls: JournalCall[]
  /** the clock readings and random numbers it read, in order */
  values: number[]
  /** the last nested call number used */
  sequence: number
}

/** one change of a durable journal: the whole of it at a checkpoint, then each call made, call settled, value read */
export type JournalChange =
  | ({ kind: 'checkpoint' } & CodeCheckpoint)
  | { kind: 'call'; index: number; call: JournalCall }
  | { kind: 'reply'; index: number; reply: BridgeReply }
  | { kind: 'values'; values: number[] }

export interface CodeJournalEvent {
  /** the run_code call's id */
  outerCallId: string
  agent?: Agent
  change: JournalChange
}

declare module 'cordis' {
  interface Events {
    /** a checkpointed program's journal changed: record it durably to run the program again after a restart */
    'code/journal'(event: CodeJournalEvent): void
    /** a run_code call starts: the journal recorded for it before a restart, if any, to run it again from */
    'code/resume'(exec: Execution): CodeCheckpoint | undefined | void
  }
}

interface Entry {
  readonly name: string
  readonly json: string
  callId?: string
  /** pending while the call runs (the one waited on, and any that ran beside it); undefined: recorded running, not settled */
  reply: BridgeReply | Promise<BridgeReply> | undefined
}

/** a reply recorded, checked: a journal read back from a file is input */
function replyOf(value: unknown): BridgeReply | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  const reply = value as Record<string, unknown>
  if (reply.ok === true && typeof reply.value === 'string') return { ok: true, value: reply.value }
  if (reply.ok === false && typeof reply.message === 'string') {
    return typeof reply.code === 'string' ? { ok: false, message: reply.message, code: reply.code } : { ok: false, message: reply.message }
  }
}

/** a checkpoint read back (from a session log), checked; throws a TypeError saying what is wrong */
export function checkpointOf(value: unknown): CodeCheckpoint {
  const record = value as Partial<CodeCheckpoint> | null
  if (typeof record !== 'object' || record === null || !Array.isArray(record.calls) || !Array.isArray(record.values)) {
    throw new TypeError('a checkpoint is { calls: [], values: [], sequence }')
  }
  const calls = record.calls.map((call, index) => {
    if (typeof call?.name !== 'string' || typeof call.arguments !== 'string')
      throw new TypeError(`call ${index + 1} of the checkpoint has no name and JSON arguments`)
    const reply = call.reply === undefined ? undefined : replyOf(call.reply)
    if (call.reply !== undefined && !reply) throw new TypeError(`call ${index + 1} of the checkpoint has a reply that is not { ok, value } or { ok, message }`)
    return { name: call.name, arguments: call.arguments, ...(typeof call.callId === 'string' ? { callId: call.callId } : {}), ...(reply ? { reply } : {}) }
  })
  if (!record.values.every((v) => typeof v === 'number')) throw new TypeError("the checkpoint's values are not all numbers")
  const sequence = Number.isSafeInteger(record.sequence) ? (record.sequence as number) : calls.length
  return { calls, values: record.values.slice(), sequence }
}

const replyBytes = (reply: BridgeReply) => (reply.ok ? reply.value.length : reply.message.length)

export class CallJournal {
  private entries: Entry[] = []
  /** the clock readings and random numbers the program read, in order (the sandbox's prelude reports them) */
  private readings: number[] = []
  private bytes = 0
  /** the calls this run of the program made so far, and how many of them the journal held when it started */
  private made = 0
  private recorded = 0
  /** the last nested call number given out */
  private sequence = 0
  /** where the journal's changes go once it is durable: from its first checkpoint, or when it was read back */
  private change: ((change: JournalChange) => boolean) | undefined
  /** why this run was stopped: the call that did not match the journal */
  diverged: string | undefined
  /** false once the journal held more than maxBytes before any checkpoint: the program is not checkpointed */
  recording = true
  /** the runs of the program so far */
  runs = 0

  constructor(
    private maxBytes: number,
    /** a call as the model reads it: `tools.read({"path":"a"})` */
    private text: (name: string, json: string) => string,
    /** the run_code call's id: a nested call's is `${outerCallId}/${n}` */
    private outerCallId = '',
  ) {}

  /**
   * a journal recorded before a restart: the program's next run is its second, answered from it. a call recorded as
   * still running is made live again when the program reaches it (the caller checked that its body never ran)
   */
  seed(checkpoint: CodeCheckpoint, change: (change: JournalChange) => boolean) {
    this.entries = checkpoint.calls.map((call) => ({ name: call.name, json: call.arguments, callId: call.callId, reply: call.reply }))
    this.readings = checkpoint.values.slice()
    this.sequence = checkpoint.sequence
    this.runs = 1
    this.change = change
  }

  /**
   * the journal is checkpointed: what it holds goes to `change` now, and every change after it; when nothing hears it
   * (`change` answers false: no code/journal listener), the journal stays in the process as before
   */
  durable(change: (change: JournalChange) => boolean) {
    this.change = change
    const calls = this.entries.map((entry): JournalCall => {
      const reply = entry.reply instanceof Promise ? undefined : entry.reply
      return { ...(entry.callId ? { callId: entry.callId } : {}), name: entry.name, arguments: entry.json, ...(reply ? { reply } : {}) }
    })
    if (!this.tell({ kind: 'checkpoint', calls, values: this.readings.slice(), sequence: this.sequence })) this.change = undefined
  }

  /** a run of the program starts */
  start() {
    this.made = 0
    this.recorded = this.entries.length
    this.diverged = undefined
    this.runs++
  }

  /** what this run reads of the clock and random numbers: the readings recorded, then its own (CodeRunRequest.values) */
  values(): RecordedValues {
    const run = this.runs
    return {
      replay: this.readings.slice(),
      record: (values) => {
        if (run !== this.runs || !this.recording) return
        for (const value of values) this.readings.push(value)
        this.count(8 * values.length)
        if (this.change) this.tell({ kind: 'values', values: values.slice() })
      },
    }
  }

  /** the calls the journal answers on the next run */
  get size() {
    return this.entries.length
  }

  /**
   * a nested call of the program: answered from the journal when this run made as many calls before it as when it was
   * recorded, else made live by `live` (and recorded) with the next call number. a call that does not match the one
   * recorded in its place stops the run: it is refused, and so is every call after it
   */
  call(name: string, json: string, live: (id: number) => BridgeReply | Promise<BridgeReply>): BridgeReply | Promise<BridgeReply> {
    const index = this.made++
    if (this.diverged) return { ok: false, message: `${this.text(name, json)} was refused: ${this.diverged}` }
    if (index < this.recorded) {
      const entry = this.entries[index]
      if (entry.name !== name || entry.json !== json) {
        this.diverged = `the program took another path when it was run again after waiting for a person: its call ${index + 1} was ${this.text(entry.name, entry.json)} the first time and ${this.text(name, json)} now`
        return { ok: false, message: `${this.text(name, json)} was refused: ${this.diverged}` }
      }
      if (entry.reply) return entry.reply
      // recorded still running before a restart, its body never started: made now, in its place, under a new id
      const id = ++this.sequence
      entry.callId = `${this.outerCallId}/${id}`
      this.tell({ kind: 'call', index, call: { callId: entry.callId, name, arguments: json } })
      const reply = live(id)
      this.settle(index, entry, reply, true)
      return reply
    }
    const id = ++this.sequence
    const reply = live(id)
    if (this.recording) this.record(name, json, `${this.outerCallId}/${id}`, reply)
    return reply
  }

  /**
   * how the run that just ended differs from the journal, if it does: a run that finished before making the calls the
   * journal holds took another path too (those calls ran, and the program no longer accounts for them)
   */
  shortfall(): string | undefined {
    if (this.diverged || this.made >= this.recorded) return this.diverged
    return `the program took another path when it was run again after waiting for a person: it finished after ${this.made} of the ${this.recorded} calls it had made the first time (the next was ${this.text(this.entries[this.made].name, this.entries[this.made].json)})`
  }

  private record(name: string, json: string, callId: string, reply: BridgeReply | Promise<BridgeReply>) {
    const entry: Entry = { name, json, callId, reply }
    const index = this.entries.push(entry) - 1
    this.count(name.length + json.length)
    if (this.change) {
      const settled = reply instanceof Promise ? undefined : reply
      this.tell({ kind: 'call', index, call: { callId, name, arguments: json, ...(settled ? { reply: settled } : {}) } })
    }
    this.settle(index, entry, reply)
  }

  /** the entry takes its reply once it is in, and a durable journal says so */
  private settle(index: number, entry: Entry, reply: BridgeReply | Promise<BridgeReply>, told = false) {
    entry.reply = reply
    if (!(reply instanceof Promise)) {
      if (told && this.change) this.tell({ kind: 'reply', index, reply })
      return this.count(replyBytes(reply))
    }
    reply.then((settled) => {
      entry.reply = settled
      this.count(replyBytes(settled))
      if (this.change) this.tell({ kind: 'reply', index, reply: settled })
    })
  }

  /** whether anything heard it */
  private tell(change: JournalChange): boolean {
    try {
      return this.change?.(change) === true
    } catch {
      return false
    }
  }

  private count(bytes: number) {
    this.bytes += bytes
    // a durable journal stays whole, whatever its size: a run again after a restart is answered from all of it
    if (this.bytes <= this.maxBytes || !this.recording || this.change) return
    // what a run answers from the journal must stay there; before the first checkpoint nothing is answered from it
    this.recording = false
    if (this.runs > 1) return
    this.entries = []
    this.readings = []
  }
}
