// the timeout wrapper: a deliberate policy to stop waiting. at the deadline the body's signal is aborted and the
// call resolves with TOOL_TIMEOUT at once; a body that ignores its signal may still be running in the background.

import { type DispatchNext, type Execution, errorResult, type ToolResult } from '@faber/core'

export type TimeoutFor = (exec: Execution) => number | undefined

export class TimeoutError extends Error {
  constructor(
    readonly tool: string,
    readonly ms: number,
  ) {
    super(`"${tool}" timed out after ${ms} ms`)
    this.name = 'TimeoutError'
  }
}

/**
 * a `tools/execute` wrapper. `upstream` is the signal this wrapper is handed when the core passes one (a wrapper
 * further out may have replaced it); otherwise the call's own signal.
 */
export function timeoutWrapper(timeoutFor: TimeoutFor) {
  return (exec: Execution, next: DispatchNext, upstream: AbortSignal = exec.signal): Promise<ToolResult> => {
    const ms = timeoutFor(exec)
    if (!ms) return next()
    const controller = new AbortController()
    const follow = () => controller.abort(upstream.reason)
    if (upstream.aborted) follow()
    else upstream.addEventListener('abort', follow, { once: true })
    let timer: ReturnType<typeof setTimeout> | undefined
    const deadline = new Promise<ToolResult>((resolve) => {
      timer = setTimeout(() => {
        controller.abort(new TimeoutError(exec.name, ms))
        resolve(
          errorResult(
            'TOOL_TIMEOUT',
            `"${exec.name}" did not finish within ${ms} ms and was stopped; retry with a smaller request or try another way to get what you need`,
          ),
        )
      }, ms)
    })
    return Promise.race([next(controller.signal), deadline]).finally(() => {
      clearTimeout(timer)
      upstream.removeEventListener('abort', follow)
    })
  }
}
