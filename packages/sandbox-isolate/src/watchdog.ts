import ivm from 'isolated-vm'

// a step on the host's thread (a reply delivered, and everything the program then runs) needs a bound that thread cannot
// enforce. isolated-vm's `timeout` option keeps a timer per call until its deadline, and timers falling due together are
// freed recursively: its timer thread overflows its stack and the process dies (SIGSEGV, after ~200 000 steps here).
// instead a small isolate of our own waits on another thread, in Atomics.wait, for the step to pass its deadline, and
// then disposes the stepping isolate (dispose interrupts it at once). a step costs the host a few shared-memory stores.

// int32 slots of the shared state; times are ms since `base`
const STEP = 0 // odd while a step runs; the host bumps it at a step's start and end, the watchdog when it ends one
const DEADLINE = 1 // when the running step must end
const TARGET = 2 // which of the watchdog's isolates the step runs in
const SLEEP_UNTIL = 3 // when the waiting watchdog wakes by itself: a step due earlier must wake it (min while awake)
const WANTED = 4 // the generation of isolates the host wants watched: a loop of another one stops
const ARMED = 5 // the generation of the loop that is watching, 0 when none
const slots = 6
/** the loop stops after this long without a step: its pending call would keep the host process from exiting */
const idleMs = 1000
const awake = -(2 ** 31)

const loopSource = `(function (shared, generation, base, idleMs, ...targets) {
  const state = new Int32Array(shared)
  Atomics.store(state, ${ARMED}, generation)
  while (Atomics.load(state, ${WANTED}) === generation) {
    const step = Atomics.load(state, ${STEP})
    const running = (step & 1) === 1
    const target = targets[Atomics.load(state, ${TARGET})]
    const now = Date.now() - base
    const until = running ? Atomics.load(state, ${DEADLINE}) : now + idleMs
    if (until > now) {
      Atomics.store(state, ${SLEEP_UNTIL}, until)
      const woke = Atomics.wait(state, ${STEP}, step, until - now)
      Atomics.store(state, ${SLEEP_UNTIL}, ${awake})
      if (!running && woke === 'timed-out') {
        // idle: stop, unless a step started meanwhile (the host checks ARMED after starting one)
        Atomics.store(state, ${ARMED}, 0)
        if (Atomics.load(state, ${STEP}) === step) return
        Atomics.store(state, ${ARMED}, generation)
      }
      continue
    }
    // the host ends a step with the same exchange: whichever comes first decides whether it passed its deadline
    if (Atomics.compareExchange(state, ${STEP}, step, step + 1) === step && target) {
      try {
        target.dispose()
      } catch {}
    }
  }
  Atomics.compareExchange(state, ${ARMED}, generation, 0)
})`

export interface Watched {
  isolate: ivm.Isolate
  /** the generation and index under which the watchdog knows this isolate */
  watch?: [generation: number, index: number]
}

/** ends a step on the host's thread that passes its deadline, for the isolates of one sandbox (one step at a time) */
export class Watchdog {
  private memory = new SharedArrayBuffer(4 * slots)
  private state = new Int32Array(this.memory)
  private base = Date.now()
  private isolate: ivm.Isolate | undefined
  private loop: ivm.Reference | undefined
  private generation = 1
  private running = false
  private closed = false

  constructor(private targets: () => Iterable<Watched>) {
    this.state[WANTED] = this.generation
  }

  /**
   * runs `body` as a step bounded by `ms`: true when it returned in time, false when the watchdog ended it (disposing its
   * isolate). undefined, without running it, when the watchdog is not watching `target` yet: the caller bounds it
   */
  run(target: Watched, ms: number, body: () => void): boolean | undefined {
    const { state, generation } = this
    if (this.closed || target.watch?.[0] !== generation || Atomics.load(state, ARMED) !== generation) return void this.arm()
    // the last step's end (STEP is even between steps, whichever side ended it), plus one
    const step = Atomics.load(state, STEP) + 1
    const deadline = Math.min(2 ** 31 - 1, Math.ceil(Date.now() - this.base + ms))
    Atomics.store(state, TARGET, target.watch[1])
    Atomics.store(state, DEADLINE, deadline)
    Atomics.store(state, STEP, step)
    // the loop may have just stopped (idle) without seeing this step
    if (Atomics.load(state, ARMED) !== generation) {
      Atomics.store(state, STEP, step + 1)
      return void this.arm()
    }
    if (deadline < Atomics.load(state, SLEEP_UNTIL)) Atomics.notify(state, STEP)
    try {
      body()
    } catch (error) {
      if (Atomics.compareExchange(state, STEP, step, step + 1) !== step) return false
      throw error
    }
    return Atomics.compareExchange(state, STEP, step, step + 1) === step
  }

  /** the sandbox made an isolate: the loop restarts with it the next time it is needed */
  changed() {
    this.generation++
    Atomics.store(this.state, WANTED, this.generation)
    Atomics.notify(this.state, STEP)
  }

  close() {
    this.closed = true
    Atomics.store(this.state, WANTED, 0)
    Atomics.notify(this.state, STEP)
    // a running loop returns at once, and its isolate is disposed then
    if (!this.running) this.isolate?.dispose()
  }

  // starts the loop on the watchdog isolate's thread, unless it runs
  private arm() {
    if (this.running || this.closed) return
    try {
      if (this.isolate === undefined || this.isolate.isDisposed) {
        this.isolate = new ivm.Isolate({ memoryLimit: 8 })
        this.loop = this.isolate.createContextSync().evalSync(loopSource, { reference: true })
      }
      const { generation } = this
      const isolates: ivm.Isolate[] = []
      for (const target of this.targets()) {
        if (target.isolate.isDisposed) continue
        target.watch = [generation, isolates.length]
        isolates.push(target.isolate)
      }
      this.running = true
      const done = () => {
        this.running = false
        if (this.closed) this.isolate?.dispose()
      }
      const shared = new ivm.ExternalCopy(this.memory).copyInto({ release: true })
      this.loop!.apply(undefined, [shared, generation, this.base, idleMs, ...isolates]).then(done, done)
    } catch {
      this.running = false
    }
  }
}
