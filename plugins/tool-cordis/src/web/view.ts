// what the web view's page renders besides the stream: the inspector's report with each plugin's config (secrets
// masked), and per layer the texts the report only names: the tool schemas on the wire and the prompt sections
// (the code-only rule, the SDK).

import type { Json, ToolRuntime } from '@faber/core'
import type { Context } from 'cordis'
import type Inspector from '../inspector.ts'
import type { Report } from '../report.ts'

export interface LayerText {
  /** the tool schemas sent to the model */
  wire: { name: string; description: string; parameters: Json }[]
  /** the non-empty prompt sections, in order */
  sections: { id: string; text: string }[]
}

export interface WebReport {
  report: Report
  /** per layer, keyed by agent name ('' for the global layer) */
  layers: Record<string, LayerText>
  /** the web answerer: whether the deployment loaded one, and the remembered answers it offers besides once */
  answerer: { enabled: boolean; remember: string[] }
}

export function webReport(ctx: Context, inspector: Inspector): WebReport {
  const report = inspector.report({ configs: true })
  const tools = ctx.root.get('tools') as ToolRuntime
  const layers: Record<string, LayerText> = {}
  for (const agent of [undefined, ...tools.agents()]) {
    const wire = tools.wire(agent)
    layers[agent?.name ?? ''] = {
      wire: wire.tools.map((tool) => ({ name: tool.name, description: tool.description, parameters: tool.parameters as Json })),
      sections: wire.sections.filter((section) => section.text).map((section) => ({ id: section.id, text: section.text })),
    }
  }
  const answerer = ctx.get('approvalWeb')
  return { report, layers, answerer: { enabled: !!answerer, remember: answerer ? [...answerer.config.remember] : [] } }
}
