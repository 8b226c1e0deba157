// bounded waits: the pipeline and the approval service never wait on a participant for ever.

export const TIMED_OUT: unique symbol = Symbol('timed out')

/** the value once it settles, or TIMED_OUT once `ms` pass first; the timer never outlives the race */
export function withDeadline<T>(value: T | PromiseLike<T>, ms: number): Promise<Awaited<T> | typeof TIMED_OUT> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const deadline = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(resolve, ms, TIMED_OUT)
  })
  return Promise.race([value, deadline]).finally(() => clearTimeout(timer))
}

/** a deadline as people say it: 30 s, 1500 ms */
export function formatDuration(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`
}

interface Waiting {
  at: number
  settle(value: typeof TIMED_OUT): void
  done: boolean
}

/**
 * waits bounded by one fixed duration, for hot paths: a timer per wait costs microseconds, but waits of one duration
 * expire in the order they began, so one timer, armed for the oldest unsettled wait, serves them all. the timer holds
 * the process while a wait is pending, as a timer per wait would, and only then: a call held by a listener that never settles
 * is answered at its deadline, instead of the process exiting with the call unanswered.
 */
export class DeadlineQueue {
  private waiting: Waiting[] = []
  private head = 0
  private timer?: ReturnType<typeof setTimeout>

  constructor(readonly ms: number) {}

  /** the value once it settles, or TIMED_OUT once `ms` pass first */
  race<T>(value: PromiseLike<T>): Promise<T | typeof TIMED_OUT> {
    return new Promise<T | typeof TIMED_OUT>((resolve, reject) => {
      const entry: Waiting = { at: Date.now() + this.ms, settle: resolve, done: false }
      this.waiting.push(entry)
      if (!this.timer) this.arm()
      else this.timer.ref()
      value.then(
        (settled) => {
          if (entry.done) return
          this.settled(entry)
          resolve(settled)
        },
        (error) => {
          if (entry.done) return
          this.settled(entry)
          reject(error)
        },
      )
    })
  }

  // waits mostly settle in the order they began: drop settled ones from the front at once, so nothing is retained
  private settled(entry: Waiting) {
    entry.done = true
    while (this.head < this.waiting.length && this.waiting[this.head].done) this.head++
    if (this.head === this.waiting.length) {
      this.waiting.length = 0
      this.head = 0
      // nothing left to time out: the timer (kept for the next wait, re-arming costs more) no longer holds the process
      this.timer?.unref()
    }
  }

  private arm() {
    while (this.head < this.waiting.length && this.waiting[this.head].done) this.head++
    if (this.head === this.waiting.length) {
      this.waiting = []
      this.head = 0
      this.timer = undefined
      return
    }
    this.timer = setTimeout(() => this.expire(), Math.max(0, this.waiting[this.head].at - Date.now()))
  }

  private expire() {
    const now = Date.now()
    for (; this.head < this.waiting.length; this.head++) {
      const entry = this.waiting[this.head]
      if (entry.done) continue
      if (entry.at > now) break
      entry.done = true
      entry.settle(TIMED_OUT)
    }
    if (this.head > 1024 && this.head * 2 > this.waiting.length) {
      this.waiting = this.waiting.slice(this.head)
      this.head = 0
    }
    this.arm()
  }
}
