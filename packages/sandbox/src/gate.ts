// the cap on sandboxes running at once: runs beyond it wait in order, and a run aborted while waiting leaves the queue

import { availableParallelism } from 'node:os'
import type { CodeRuntimeLoad } from './types.ts'

/** two running programs per core: enough to overlap their waits on tools, few enough to bound threads and memory */
export const defaultMaxConcurrent = () => Math.max(2, availableParallelism() * 2)

export class Gate {
  private running = 0
  private queue: { start: (release: (() => void) | undefined) => void; signal: AbortSignal; onAbort: () => void }[] = []
  private peakRunning = 0
  private peakQueued = 0

  constructor(readonly maxConcurrent: number) {
    if (!(maxConcurrent >= 1)) throw new RangeError(`maxConcurrent must be at least 1, got ${maxConcurrent}`)
  }

  /** resolves with the function that frees the place once the run may start, or undefined if `signal` aborts first */
  acquire(signal: AbortSignal): Promise<(() => void) | undefined> {
    if (signal.aborted) return Promise.resolve(undefined)
    if (this.running < this.maxConcurrent && this.queue.length === 0) return Promise.resolve(this.enter())
    return new Promise((start) => {
      const waiter = {
        start,
        signal,
        onAbort: () => {
          this.queue.splice(this.queue.indexOf(waiter), 1)
          start(undefined)
        },
      }
      signal.addEventListener('abort', waiter.onAbort, { once: true })
      this.queue.push(waiter)
      this.peakQueued = Math.max(this.peakQueued, this.queue.length)
    })
  }

  /** ends every waiting run as if aborted */
  drain() {
    for (const waiter of this.queue.splice(0)) {
      waiter.signal.removeEventListener('abort', waiter.onAbort)
      waiter.start(undefined)
    }
  }

  load(): CodeRuntimeLoad {
    const { running, maxConcurrent, peakRunning, peakQueued } = this
    return { running, queued: this.queue.length, maxConcurrent, peakRunning, peakQueued }
  }

  private enter() {
    this.running++
    this.peakRunning = Math.max(this.peakRunning, this.running)
    let released = false
    return () => {
      if (released) return
      released = true
      this.running--
      const next = this.queue.shift()
      if (!next) return
      next.signal.removeEventListener('abort', next.onAbort)
      next.start(this.enter())
    }
  }
}
