// a run_code program that waits on a person for longer than checkpointAfterMs gives its sandbox unit back (its run is
// ended), and once the person answered it is run again from the start: each nested call it already made is answered
// from this journal (no pipeline, no body: a body that completed never runs twice), the call it waited on gets the
// answer it was waiting for, and from there on it runs live. a program that takes another path on the second run is
// stopped before any new call starts.

import type { BridgeReply, RecordedValues } from './code-runtime.ts'

interface Entry {
  readonly name: string
  readonly json: string
  /** pending while the call runs (the one waited on, and any that ran beside it) */
  reply: BridgeReply | Promise<BridgeReply>
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
  ) {}

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
      },
    }
  }

  /** the calls the journal answers on the next run */
  get size() {
    return this.entries.length
  }

  /**
   * a nested call of the program: answered from the journal when this run made as many calls before it as when it was
   * recorded, else made live by `live` (and recorded). a call that does not match the one recorded in its place stops
   * the run: it is refused, and so is every call after it
   */
  call(name: string, json: string, live: () => BridgeReply | Promise<BridgeReply>): BridgeReply | Promise<BridgeReply> {
    const index = this.made++
    if (this.diverged) return { ok: false, message: `${this.text(name, json)} was refused: ${this.diverged}` }
    if (index < this.recorded) {
      const entry = this.entries[index]
      if (entry.name === name && entry.json === json) return entry.reply
      this.diverged = `the program took another path when it was run again after waiting for a person: its call ${index + 1} was ${this.text(entry.name, entry.json)} the first time and ${this.text(name, json)} now`
      return { ok: false, message: `${this.text(name, json)} was refused: ${this.diverged}` }
    }
    const reply = live()
    if (this.recording) this.record(name, json, reply)
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

  private record(name: string, json: string, reply: BridgeReply | Promise<BridgeReply>) {
    const entry: Entry = { name, json, reply }
    this.entries.push(entry)
    this.count(name.length + json.length)
    if (!(reply instanceof Promise)) return this.count(replyBytes(reply))
    reply.then((settled) => {
      entry.reply = settled
      this.count(replyBytes(settled))
    })
  }

  private count(bytes: number) {
    this.bytes += bytes
    if (this.bytes <= this.maxBytes || !this.recording) return
    // what a run answers from the journal must stay there; before the first checkpoint nothing is answered from it
    this.recording = false
    if (this.runs > 1) return
    this.entries = []
    this.readings = []
  }
}
