// one dispatch for agent-scoped listeners, after cordis' own events.ts: a generator calls the listeners in turn, and
// the three ways Faber tells them something are thin wrappers over it. unlike cordis' emit, serial and bail, a listener
// that throws (or rejects) ends no dispatch by itself: what it threw is its answer, and the caller decides.

import { isThenable, type Listener, ownerOf } from './cordis.ts'
import { withDeadline } from './deadline.ts'

/** what one listener answered: its plugin, and what it returned, or (`failed`) what it threw */
export type Answer = { plugin: string; failed: false; value: unknown } | { plugin: string; failed: true; error: unknown }

/**
 * calls each of `listeners` with `args`, in order, one per step: each step yields what that listener returned or threw
 * (a promise it returned is yielded as it is). in series: the next listener is called when the caller asks for it
 */
export function* dispatch(listeners: readonly Listener[], args: readonly unknown[]): Generator<Answer, void, undefined> {
  for (const hook of listeners) {
    const plugin = ownerOf(hook).plugin
    let answer: Answer
    try {
      answer = { plugin, failed: false, value: hook.callback(...args) }
    } catch (error) {
      answer = { plugin, failed: true, error }
    }
    yield answer
  }
}

/**
 * tells every one of `listeners`, each isolated from the others, as an observer is: one that throws, or whose promise
 * rejects, goes to `failed` (a rejection is never left for the host to find unhandled), and the rest still hear
 */
export function emitEach(listeners: readonly Listener[], args: readonly unknown[], failed: (plugin: string, error: unknown) => void) {
  for (const answer of dispatch(listeners, args)) {
    if (answer.failed) failed(answer.plugin, answer.error)
    else if (isThenable(answer.value)) answer.value.then(undefined, (error) => failed(answer.plugin, error))
  }
}

export interface AskOptions {
  /** the most ms a listener of this plugin may take (none: no limit); past it its answer is TIMED_OUT */
  deadline?(plugin: string): number | undefined
  /** told which plugin's answer is awaited, before it is */
  asking?(plugin: string): void
}

/**
 * asks `listeners` in turn, awaiting each answer: the first that answers (anything but undefined or null), fails or
 * runs out of time (its value TIMED_OUT) wins, and the rest are not asked. undefined when none answered
 */
export async function firstAnswer(listeners: readonly Listener[], args: readonly unknown[], options: AskOptions = {}): Promise<Answer | undefined> {
  for (const answer of dispatch(listeners, args)) {
    if (answer.failed) return answer
    const { plugin } = answer
    // nothing runs between the call and here: told now, the caller knows whom it waits for
    options.asking?.(plugin)
    let value = answer.value
    if (isThenable(value)) {
      const limit = options.deadline?.(plugin)
      try {
        value = await (limit ? withDeadline(value, limit) : value)
      } catch (error) {
        return { plugin, failed: true, error }
      }
    }
    if (value !== undefined && value !== null) return { plugin, failed: false, value }
  }
}
