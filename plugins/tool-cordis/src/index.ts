import type { Context } from 'cordis'
import Inspector from './inspector.ts'
import { buildReport, type Report } from './report.ts'

export * from './inspector.ts'
export { isSecretKey, MASK, maskConfig } from './mask.ts'
export { callLine, capText, renderReport, SECTIONS, type Selection, select, type What } from './render.ts'
export * from './report.ts'
export { BEFORE_POLICY_NOTE, type CallError, type CallRecord, COLLAPSED_NOTE, type TraceObserver } from './trace.ts'
export type { LiveApproval, LiveEvent, LiveProgram, LiveSnapshot, LiveStart } from './web/live.ts'
export { parseListen, serveWebView, type WebView, type WebViewOptions } from './web/server.ts'
export type { LayerText, WebReport } from './web/view.ts'
export default Inspector

/** the report of a live deployment: the inspector's when it is loaded (with the call trace), else one without calls */
export function inspect(ctx: Context): Report {
  const inspector = ctx.get('inspector') as Inspector | undefined
  return inspector ? inspector.report() : buildReport(ctx)
}
