// the one rule for running tool calls side by side, used by the run_code bridge (a program's nested calls) and the
// agent loop (one model turn's calls): calls start in submission order, consecutive concurrency-safe calls overlap up
// to a limit, and an exclusive call waits for what runs, runs alone, and holds back what follows.

/** `parallel` only when the definition's isConcurrencySafe(args) returned exactly true; anything else is `exclusive` */
export type ExecutionMode = 'parallel' | 'exclusive'

export class Scheduler {
  private running = 0
  private exclusive = false
  private queue: { mode: ExecutionMode; start: (ok: boolean) => void }[] = []
  private closed = false

  constructor(private limit: number) {}

  /** resolves true when the call may start, false when the scheduler was closed first */
  acquire(mode: ExecutionMode): Promise<boolean> {
    if (this.closed) return Promise.resolve(false)
    return new Promise((start) => {
      this.queue.push({ mode, start })
      this.pump()
    })
  }

  /** starts the call at once when nothing waits and the rule allows it (no promise, no turn); else use acquire */
  tryAcquire(mode: ExecutionMode): boolean {
    if (this.closed || this.queue.length || this.exclusive) return false
    if (mode === 'exclusive') {
      if (this.running > 0) return false
      this.exclusive = true
    } else if (this.running >= this.limit) {
      return false
    }
    this.running++
    return true
  }

  /** the call that acquired with `mode` has finished */
  release(mode: ExecutionMode) {
    this.running--
    if (mode === 'exclusive') this.exclusive = false
    this.pump()
  }

  /** refuses every waiting and later call */
  close() {
    this.closed = true
    for (const waiting of this.queue.splice(0)) waiting.start(false)
  }

  private pump() {
    while (this.queue.length && !this.exclusive) {
      const head = this.queue[0]
      if (head.mode === 'exclusive') {
        if (this.running > 0) return
        this.exclusive = true
      } else if (this.running >= this.limit) {
        return
      }
      this.queue.shift()
      this.running++
      head.start(true)
    }
  }
}
