// per-call cost of @faber/plugin-otel: ctx.tools.execute of a trivial tool with the plugin loaded, with no SDK (the
// API's no-op tracer) and with a real BasicTracerProvider exporting to memory, against execute without the plugin.

import ToolRuntime from '@faber/core'
import * as Otel from '@faber/plugin-otel'
import { trace } from '@opentelemetry/api'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { Context, Logger } from 'cordis'
import { addTool, isMain, row, timeOp } from './harness.ts'

Logger.levels.base = 0

const ITERATIONS = 20000

const add = addTool()

async function deployment(otel: boolean) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  if (otel) ctx.plugin(Otel)
  await ctx.start()
  ctx.tools.register(add)
  return ctx
}

export async function benchOtel() {
  const args = { a: 1, b: 2 }
  const signal = new AbortController().signal
  const input = { callId: 'c', name: 'add', arguments: args, signal }

  trace.disable()
  const plain = await deployment(false)
  const plainTools = plain.tools.executor
  const base = await timeOp(() => plainTools.execute(input), ITERATIONS)

  // no SDK registered: the plugin's tracer is the API's no-op
  const noop = await deployment(true)
  const noopTools = noop.tools.executor
  const withNoop = await timeOp(() => noopTools.execute(input), ITERATIONS)

  // a real SDK; the exporter is emptied every 1,000 spans so memory stays flat
  const exporter = new InMemorySpanExporter()
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  trace.setGlobalTracerProvider(provider)
  const real = await deployment(true)
  const realTools = real.tools.executor
  let calls = 0
  let exported = 0
  const withSdk = await timeOp(() => {
    if (++calls % 1000 === 0) {
      exported += exporter.getFinishedSpans().length
      exporter.reset()
    }
    return realTools.execute(input)
  }, ITERATIONS)
  exported += exporter.getFinishedSpans().length

  console.log('otel: ctx.tools.executor.execute of a trivial tool, per call')
  row('baseline: execute without the plugin', base, base)
  row('with plugin-otel, no SDK (no-op tracer)', withNoop, base)
  row('with plugin-otel, BasicTracerProvider + memory', withSdk, base)
  console.log(`  (the SDK run exported ${exported} spans for ${calls} calls)`)

  await plain.stop()
  await noop.stop()
  await real.stop()
  await provider.shutdown()
  trace.disable()
  return { baseUs: base, noopUs: withNoop, sdkUs: withSdk, noopRatio: withNoop / base, sdkRatio: withSdk / base }
}

if (isMain(import.meta.url)) await benchOtel()
