// rate limits per rule: calls in the current turn, counted per conversation, and calls in the last 60 s (a sliding
// window), counted per agent across all its conversations.

const MINUTE = 60_000

export interface RateRule {
  name: string
  matches(tool: string): boolean
  perTurn: number
  perMinute: number
}

function countsOf<T>(table: WeakMap<object, Map<RateRule, T>>, slot: object) {
  let counts = table.get(slot)
  if (!counts) table.set(slot, (counts = new Map()))
  return counts
}

export class RateLimiter {
  /** calls in the current turn, per conversation and rule */
  private turns = new WeakMap<object, Map<RateRule, number>>()
  /** start times inside the window, oldest first, per agent and rule */
  private windows = new WeakMap<object, Map<RateRule, number[]>>()

  constructor(
    private rules: readonly RateRule[],
    private now: () => number,
  ) {}

  /**
   * a reason when a call of `tool` would exceed a limit; when `consume` and within limits, counts it. `conversation`
   * keeps the per-turn counts, `agent` the per-minute window
   */
  check(conversation: object, agent: object, tool: string, consume: boolean): string | undefined {
    const rules = this.rules.filter((rule) => rule.matches(tool))
    if (!rules.length) return
    const turns = countsOf(this.turns, conversation)
    const windows = countsOf(this.windows, agent)
    const now = this.now()
    for (const rule of rules) {
      let times = windows.get(rule)
      if (!times) windows.set(rule, (times = []))
      while (times.length && times[0] <= now - MINUTE) times.shift()
      if (rule.perTurn && (turns.get(rule) ?? 0) >= rule.perTurn) {
        return (
          `rate limit "${rule.name}": "${tool}" may run at most ${rule.perTurn} time${rule.perTurn > 1 ? 's' : ''} per turn and this turn has used them all; ` +
          'work with the results you already have and report back, or wait for the next user message'
        )
      }
      if (rule.perMinute && times.length >= rule.perMinute) {
        const wait = Math.max(1, Math.ceil((times[0] + MINUTE - now) / 1000))
        return `rate limit "${rule.name}": "${tool}" may run at most ${rule.perMinute} time${rule.perMinute > 1 ? 's' : ''} per minute; the next call is possible in ${wait} s, do something else meanwhile`
      }
    }
    if (!consume) return
    for (const rule of rules) {
      turns.set(rule, (turns.get(rule) ?? 0) + 1)
      windows.get(rule)!.push(now)
    }
  }

  /** a new user turn: the conversation's per-turn counts start again; the per-minute window is about time and stays */
  resetTurn(conversation: object) {
    this.turns.delete(conversation)
  }
}
