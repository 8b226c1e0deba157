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
