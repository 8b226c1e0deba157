// waiting for a person is not computing: while a nested call of a run_code program waits on a person (an approval, a
// form), the program's wall-clock budget stops. an answerer that asks a person says so with `waitOnPerson`; the run
// hears it through its request's `waits` (code-runtime.ts), and each backend stops its wall-clock timer meanwhile.

import type { WaitSignal } from './code-runtime.ts'
import { type Execution, ExecutionRecord, type ExecutionToken, liveExecutions } from './tool.ts'

/** how many programs wait on a person at once in one deployment, against its bound */
export interface WaitingPrograms {
  /** programs whose wall clock is stopped now, a nested call of each waiting on a person */
  waiting: number
  /** the most that may be: a program past it keeps its wall clock running while it waits */
  maxWaiting: number
  /** the most that waited at once, and how many were refused a stop, since the deployment started */
  peakWaiting: number
  refused: number
  /** programs checkpointed while they wait: their sandbox units given back, each to run again once answered */
  checkpointed: number
}

/** one deployment's count of the programs waiting on a person */
export class WaitTally {
  waiting = 0
  peakWaiting = 0
  refused = 0
  checkpointed = 0

  constructor(readonly maxWaiting: () => number) {}

  snapshot(): WaitingPrograms {
    const { waiting, peakWaiting, refused, checkpointed } = this
    return { waiting, maxWaiting: this.maxWaiting(), peakWaiting, refused, checkpointed }
  }
}

/**
 * one run's waits on a person, as its backend hears them: `waiting` while at least one of its nested calls waits and the
 * deployment's bound let it stop its clock. a wait past the bound is refused (`refused` says how many were): the clock
 * runs on, as it would with no person involved
 */
export class RunWaits implements WaitSignal {
  private holds = 0
  private stopped = false
  /** checkpointed: counted as such, not among the programs waiting with their units */
  private parked = false
  private answered: (() => void)[] = []
  private listeners: ((waiting: boolean) => void)[] = []
  private ended = false
  refused = 0

  constructor(private tally: WaitTally) {}

  get waiting() {
    return this.stopped
  }

  watch(listener: (waiting: boolean) => void) {
    this.listeners.push(listener)
    return () => {
      const index = this.listeners.indexOf(listener)
      if (index >= 0) this.listeners.splice(index, 1)
    }
  }

  /** a nested call starts waiting on a person; the function it returns says the wait is over (more calls do nothing) */
  hold(): () => void {
    if (this.ended) return () => {}
    this.holds++
    if (this.holds === 1) this.stop()
    let released = false
    return () => {
      if (released) return
      released = true
      if (--this.holds === 0) this.start()
    }
  }

  /** the run is over: its clock is given back, and later holds do nothing */
  end() {
    this.holds = 0
    this.start()
    this.ended = true
    this.listeners = []
  }

  /** the program was checkpointed while it waits: it holds no sandbox unit until it runs again */
  checkpoint() {
    if (!this.stopped || this.parked) return
    this.parked = true
    this.tally.waiting--
    this.tally.checkpointed++
  }

  /** resolves once no call of the program waits on a person, or `signal` aborted */
  settled(signal: AbortSignal): Promise<void> {
    if (this.holds === 0 || signal.aborted) return Promise.resolve()
    return new Promise((resolve) => {
      const done = () => {
        signal.removeEventListener('abort', done)
        resolve()
      }
      signal.addEventListener('abort', done, { once: true })
      this.answered.push(done)
    })
  }

  private stop() {
    const { tally } = this
    if (tally.waiting >= tally.maxWaiting()) {
      this.refused++
      tally.refused++
      return
    }
    tally.waiting++
    if (tally.waiting > tally.peakWaiting) tally.peakWaiting = tally.waiting
    this.stopped = true
    this.tell(true)
  }

  private start() {
    for (const done of this.answered.splice(0)) done()
    if (!this.stopped) return
    this.stopped = false
    if (this.parked) this.tally.checkpointed--
    else this.tally.waiting--
    this.parked = false
    this.tell(false)
  }

  private tell(waiting: boolean) {
    for (const listener of [...this.listeners]) {
      try {
        listener(waiting)
      } catch {}
    }
  }
}

// each running program's waits, by its run_code execution's token: a nested call names its program by that token
const runs = new WeakMap<ExecutionToken, RunWaits>()

/** @internal run_code: the program of `token` hears its nested calls' waits until the function it returns is called */
export function listenForWaits(token: ExecutionToken, waits: RunWaits): () => void {
  runs.set(token, waits)
  return () => {
    if (runs.get(token) === waits) runs.delete(token)
    waits.end()
  }
}

// the releases of the holds taken for each nested call still running; a call that ended (allowed, denied, abandoned)
// waits on nobody, whatever its answerers do, so its holds end with it. a call that ended takes none
const heldFor = new WeakMap<object, (() => void)[]>()

/**
 * an answerer that asks a person calls this for the calls it asks about, as it starts waiting for them: the wall-clock
 * budget of each run_code program that made one of them stops until the function it returns is called (call it once
 * the person answered, or the question was withdrawn) or the call ends, whichever comes first. a direct call, or one
 * whose program already ended, is unaffected. the approval's own deadline still bounds the wait, and the program's cpu
 * budget is untouched
 */
export function waitOnPerson(...calls: readonly (Pick<Execution, 'parent'> | undefined)[]): () => void {
  const releases: (() => void)[] = []
  for (const call of calls) {
    const waits = call?.parent && runs.get(call.parent)
    if (!waits) continue
    // a call of the pipeline's is held only while it runs; another object (a test's) until the release is called
    const live = liveExecutions.running(call)
    if (!live && call instanceof ExecutionRecord) continue
    const release = waits.hold()
    releases.push(release)
    if (!live) continue
    const held = heldFor.get(call)
    if (held) held.push(release)
    else heldFor.set(call, [release])
  }
  return () => {
    for (const release of releases.splice(0)) release()
  }
}

/** @internal the pipeline: `call` ended, so the holds its answerers took for it end too (an answerer that never returns holds nothing) */
export function callEnded(call: object): void {
  const held = heldFor.get(call)
  if (!held) return
  heldFor.delete(call)
  for (const release of held) release()
}
