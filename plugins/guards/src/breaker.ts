// the repeat-call breaker's memory: per agent, how many identical calls came in a row. run_code is a container,
// so its own repeats are counted in a lane of their own and it does not interrupt a streak of the calls its
// programs make.

interface Streak {
  key: string
  count: number
}

interface Streaks {
  calls?: Streak
  transport?: Streak
}

export type Lane = keyof Streaks

export class Breaker {
  private streaks = new WeakMap<object, Streaks>()

  /** counts one call into its agent's streak; returns how many identical calls in a row it makes */
  record(slot: object, lane: Lane, key: string): number {
    let streaks = this.streaks.get(slot)
    if (!streaks) this.streaks.set(slot, (streaks = {}))
    const streak = streaks[lane]
    if (streak?.key === key) return ++streak.count
    streaks[lane] = { key, count: 1 }
    return 1
  }

  reset(slot: object) {
    this.streaks.delete(slot)
  }
}
