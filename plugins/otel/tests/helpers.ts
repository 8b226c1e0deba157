// an in-memory OpenTelemetry SDK registered as the global tracer provider, and the span tree it recorded

import { trace } from '@opentelemetry/api'
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'

export interface Recorder {
  exporter: InMemorySpanExporter
  provider: BasicTracerProvider
  close(): Promise<void>
}

/** registers a fresh provider globally (the plugin reaches it through @opentelemetry/api only) */
export function record(): Recorder {
  const exporter = new InMemorySpanExporter()
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  trace.disable()
  if (!trace.setGlobalTracerProvider(provider)) throw new Error('could not register the test tracer provider')
  return {
    exporter,
    provider,
    async close() {
      trace.disable()
      await provider.shutdown()
    },
  }
}

export interface Node {
  name: string
  attributes: Record<string, unknown>
  events: { name: string; attributes: Record<string, unknown> }[]
  status: number
  children: Node[]
}

/** the finished spans as a tree, children in start order */
export function tree(spans: readonly ReadableSpan[]): Node[] {
  const sorted = [...spans].sort((a, b) => a.startTime[0] - b.startTime[0] || a.startTime[1] - b.startTime[1])
  const nodes = new Map<string, Node>()
  for (const span of sorted) {
    nodes.set(span.spanContext().spanId, {
      name: span.name,
      attributes: { ...span.attributes },
      events: span.events.map((e) => ({ name: e.name, attributes: { ...e.attributes } })),
      status: span.status.code,
      children: [],
    })
  }
  const roots: Node[] = []
  for (const span of sorted) {
    const node = nodes.get(span.spanContext().spanId)!
    const parentId = span.parentSpanContext?.spanId
    const parent = parentId ? nodes.get(parentId) : undefined
    if (parent) parent.children.push(node)
    else roots.push(node)
  }
  return roots
}

/** a compact picture of a tree: names and the attributes asked for, nested by indentation */
export function outline(nodes: Node[], keys: string[], depth = 0): string[] {
  const lines: string[] = []
  for (const node of nodes) {
    const shown = keys.filter((k) => node.attributes[k] !== undefined).map((k) => `${k.replace(/^(faber|gen_ai)\./, '')}=${node.attributes[k]}`)
    lines.push(`${'  '.repeat(depth)}${node.name}${shown.length ? ` [${shown.join(' ')}]` : ''}`)
    lines.push(...outline(node.children, keys, depth + 1))
  }
  return lines
}
