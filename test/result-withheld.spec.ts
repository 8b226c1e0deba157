// a tools/post-execute listener that fails after the body ran: the model, the inspector's trace, the OTel span and the
// session log all say the tool ran and its result was withheld (RESULT_WITHHELD), never that it was denied.

import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AgentSession, parseSessionLog, ScriptedModel, SessionLog } from '@faber/agent'
import { deployment, disposeAll, echoTool } from '@faber/core/testing'
import * as Otel from '@faber/plugin-otel'
import Inspector from '@faber/plugin-tool-cordis'
import { trace } from '@opentelemetry/api'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'

Logger.levels.base = 0

describe('a failure after the body ran says the body ran', () => {
  let dir: string
  let exporter: InMemorySpanExporter
  let provider: BasicTracerProvider
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-withheld-'))
    exporter = new InMemorySpanExporter()
    provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
    trace.disable()
    trace.setGlobalTracerProvider(provider)
  })
  afterEach(async () => {
    await disposeAll()
    trace.disable()
    await provider.shutdown()
    await rm(dir, { recursive: true, force: true })
  })

  it('RESULT_WITHHELD in the result, the trace, the span and the session log', async () => {
    let ran = 0
    const ctx = await deployment({}, (ctx) => {
      ctx.plugin(Inspector)
      ctx.plugin(Otel)
      ctx.plugin({
        name: 'redactor',
        inject: ['tools'],
        apply: (ctx: Context) =>
          ctx.tools.listen('tools/post-execute', () => {
            throw new Error('the redaction rules could not be read')
          }),
      })
    })
    ctx.tools.register(echoTool('pay', { onRun: () => ran++ }))
    const path = join(dir, 'session.jsonl')
    const log = await SessionLog.open(path)
    const model = new ScriptedModel([{ toolCalls: [{ id: 'c1', name: 'pay', arguments: { text: '10 EUR' } }] }, { text: 'done' }])
    const session = new AgentSession(ctx, { model, log })
    await session.send('pay the bill')
    await log.close()

    expect(ran).to.equal(1)
    const told = session.messages.find((message) => message.role === 'tool')
    expect(told?.content).to.match(/^Error: "pay" ran, but its result was withheld because a tools\/post-execute listener of plugin "redactor" failed/)

    const withheldBy = { stage: 'post-execute', plugin: 'redactor' }
    const [record] = ctx.inspector.report().calls.filter((call) => call.name === 'pay')
    expect(record.error).to.deep.include({ code: 'RESULT_WITHHELD', withheldBy })
    expect(record.error?.deniedBy).to.equal(undefined)

    const span = exporter.getFinishedSpans().find((s) => s.name === 'execute_tool pay')
    expect(span?.attributes).to.deep.include({
      [Otel.ATTR.outcome]: 'withheld',
      [Otel.ATTR.errorCode]: 'RESULT_WITHHELD',
      [Otel.ATTR.withheldByPlugin]: 'redactor',
      [Otel.ATTR.withheldByStage]: 'post-execute',
    })
    expect(span?.attributes).to.not.have.property(Otel.ATTR.deniedByPlugin)

    const logged = parseSessionLog(await readFile(path, 'utf8')).records.find((r) => r.type === 'result')
    expect(logged).to.deep.include({ code: 'RESULT_WITHHELD', withheldBy })
    expect(logged).to.not.have.property('deniedBy')
  })
})
