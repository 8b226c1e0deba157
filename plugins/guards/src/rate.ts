// rate limits per agent and rule: calls in the current turn, and calls in the last 60 s (a sliding window).

const MINUTE = 60_000

export interface RateRule {
  name: string
  matches(tool: string): boolean
  perTurn: number
  perMinute: number
}

interface Counts {
  turn: number
  /** start times inside the window, oldest first */
  times: number[]
}

export class RateLimiter {
  private counts = new WeakMap<object, Map<RateRule, Counts>>()

  constructor(
    private rules: readonly RateRule[],
    private now: () => number,
  ) {}

  /** a reason when a call of `tool` would exceed a limit; when `consume` and within limits, counts it */
  check(slot: object, tool: string, consume: boolean): string | undefined {
    const rules = this.rules.filter((rule) => rule.matches(tool))
    if (!rules.length) return
    let perSlot = this.counts.get(slot)
    if (!perSlot) this.counts.set(slot, (perSlot = new Map()))
    const now = this.now()
    const entries: Counts[] = []
    for (const rule of rules) {
      let counts = perSlot.get(rule)
      if (!counts) perSlot.set(rule, (counts = { turn: 0, times: [] }))
      while (counts.times.length && counts.times[0] <= now - MINUTE) counts.times.shift()
      if (rule.perTurn && counts.turn >= rule.perTurn) {
        return (
          `rate limit "${rule.name}": "${tool}" may run at most ${rule.perTurn} time${rule.perTurn > 1 ? 's' : ''} per turn and this turn has used them all; ` +
          'work with the results you already have and report back, or wait for the next user message'
        )
      }
      if (rule.perMinute && counts.times.length >= rule.perMinute) {
        const wait = Math.max(1, Math.ceil((counts.times[0] + MINUTE - now) / 1000))
        return `rate limit "${rule.name}": "${tool}" may run at most ${rule.perMinute} time${rule.perMinute > 1 ? 's' : ''} per minute; the next call is possible in ${wait} s, do something else meanwhile`
      }
      entries.push(counts)
    }
    if (!consume) return
    for (const counts of entries) {
      counts.turn++
      counts.times.push(now)
    }
  }

  /** a new user turn: per-turn counts start again; the per-minute window is about time and stays */
  resetTurn(slot: object) {
    for (const counts of this.counts.get(slot)?.values() ?? []) counts.turn = 0
  }
}
