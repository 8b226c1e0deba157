// a run's wall-clock budget: a timer that stops while the program waits on a person (the request's `waits`: an
// approval or a form answered by someone) and starts again with what was left. waits on tools still count

import type { WaitSignal } from './types.ts'

export class WallClock {
  /** ms of the budget spent before the stretch now running */
  private spent = 0
  /** when the stretch now running began (performance.now()), or -1 while the clock is stopped */
  private since = -1
  private timer: NodeJS.Timeout | undefined
  private unwatch: (() => void) | undefined
  private ended = false

  constructor(
    private budgetMs: number,
    private expire: () => void,
  ) {}

  /** the run starts now; its clock stops whenever `waits` says the program waits on a person */
  start(waits: WaitSignal | undefined) {
    if (waits) this.unwatch = waits.watch((waiting) => (waiting ? this.pause() : this.resume()))
    if (!waits?.waiting) this.resume()
  }

  /** the run is over */
  end() {
    this.ended = true
    this.pause()
    this.unwatch?.()
    this.unwatch = undefined
  }

  private pause() {
    if (this.since < 0) return
    this.spent += performance.now() - this.since
    this.since = -1
    clearTimeout(this.timer)
    this.timer = undefined
  }

  private resume() {
    if (this.ended || this.since >= 0) return
    this.since = performance.now()
    this.timer = setTimeout(this.expire, Math.max(0, this.budgetMs - this.spent))
  }
}
