import { readFileSync } from 'node:fs'
import { AgentSession, ScriptedModel } from '@faber/agent'
import { createAgent, defineTool, t } from '@faber/core'
import { call, deployment as deploy, disposeAll, echoTool } from '@faber/core/testing'
import Guards from '@faber/plugin-guards'
import WorkerSandbox from '@faber/sandbox'
import { SpanStatusCode, trace } from '@opentelemetry/api'
import { expect } from 'chai'
import { Logger } from 'cordis'
import * as Otel from '../src/index.ts'
import { ATTR, STAGE_EVENT } from '../src/index.ts'
import { outline, type Recorder, record, tree } from './helpers.ts'

Logger.levels.base = 0

const remove = defineTool({
  name: 'remove',
  description: 'removes a file',
  parameters: t.object({ path: t.string() }),
  output: { schema: t.object({}) },
  execute: () => ({}),
})

/** code mode on the worker sandbox, a guard refusing `remove`, the plugin, and the agent "coder" */
async function deployment(otel: Otel.ConfigInput = {}) {
  const ctx = await deploy({ mode: 'code' }, (ctx) => {
    ctx.plugin(Guards, { deny: [{ name: 'no-removal', tools: ['remove'], reason: 'Files are not removed here.' }] })
    ctx.plugin(WorkerSandbox, { poolSize: 1 })
    ctx.plugin(Otel, otel)
  })
  ctx.tools.register(echoTool('echo', { concurrencySafe: true }))
  ctx.tools.register(remove)
  return { ctx, coder: createAgent(ctx, { name: 'coder' }) }
}

const PROGRAM = [
  "const [a, b] = await Promise.all([tools.echo({ text: 'a' }), tools.echo({ text: 'b' })])",
  'let refused = ""',
  "try { await tools.remove({ path: 'x' }) } catch (error) { refused = error.code }",
  'return [a.echoed, b.echoed, refused]',
].join('\n')

describe('@faber/plugin-otel', () => {
  let recorder: Recorder
  beforeEach(() => {
    recorder = record()
  })
  afterEach(async () => {
    await disposeAll()
    await recorder.close()
  })

  it('records a run_code call with its nested calls as children, and a denied call with who denied it', async () => {
    const { ctx, coder } = await deployment()
    const result = await call(ctx, 'run_code', { code: PROGRAM, description: 'echo twice, try a removal' }, { agent: coder, callId: 'c1' })
    expect(result.isError, result.content).to.equal(false)
    expect((result as any).value.result).to.deep.equal(['a', 'b', 'DENIED'])
    const roots = tree(recorder.exporter.getFinishedSpans())
    const keys = [ATTR.agent, ATTR.mode, ATTR.nested, ATTR.line, ATTR.column, ATTR.outcome, ATTR.errorCode, ATTR.deniedByStage, ATTR.deniedByPlugin]
    // each nested call says where in the program it was made: the line, and the column of the tool's name
    expect(outline(roots, keys)).to.deep.equal([
      'execute_tool run_code [agent=coder mode=code nested=false outcome=ok]',
      '  execute_tool echo [agent=coder mode=code nested=true call.line=1 call.column=41 outcome=ok]',
      '  execute_tool echo [agent=coder mode=code nested=true call.line=1 call.column=68 outcome=ok]',
      '  execute_tool remove [agent=coder mode=code nested=true call.line=3 call.column=19 outcome=denied error.code=DENIED denied_by.stage=pre-execute denied_by.plugin=guards]',
    ])
    const [program] = roots
    expect(program.attributes).to.include({ [ATTR.tool]: 'run_code', [ATTR.callId]: 'c1', [ATTR.rootCallId]: 'c1', [ATTR.operation]: 'execute_tool' })
    // the instrumentation scope: the plugin's name and version, as a backend groups and filters spans by them
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'))
    const scopes = recorder.exporter.getFinishedSpans().map((span) => `${span.instrumentationScope.name}@${span.instrumentationScope.version}`)
    expect(new Set(scopes)).to.deep.equal(new Set([`@faber/plugin-otel@${version}`]))
    expect(program.status).to.equal(SpanStatusCode.UNSET)
    const denied = program.children[2]
    expect(denied.status).to.equal(SpanStatusCode.ERROR)
    expect(denied.attributes).to.include({ [ATTR.rootCallId]: 'c1', [ATTR.errorType]: 'DENIED' })
    expect(denied.events).to.have.length(1)
    expect(denied.events[0].name).to.equal(STAGE_EVENT)
    expect(denied.events[0].attributes).to.include({ [ATTR.stage]: 'pre-execute', [ATTR.decision]: 'deny', [ATTR.by]: 'guards' })
    expect(denied.events[0].attributes[ATTR.reason]).to.contain('Files are not removed here.')
  })

  it('records a call that ended before any policy saw it: collapsed under code mode, with its stage event', async () => {
    const { ctx, coder } = await deployment()
    const result = await call(ctx, 'echo', { text: 'hi' }, { agent: coder })
    expect(result.isError).to.equal(true)
    const roots = tree(recorder.exporter.getFinishedSpans())
    expect(outline(roots, [ATTR.outcome, ATTR.errorCode])).to.deep.equal(['execute_tool echo [outcome=error error.code=UNKNOWN_TOOL]'])
    expect(roots[0].events.map((e) => e.attributes)).to.deep.equal([{ [ATTR.stage]: 'create', [ATTR.decision]: 'collapsed', [ATTR.by]: 'core' }])
  })

  it('records each model request of the agent loop next to the calls it asked for', async () => {
    const { ctx, coder } = await deployment()
    const model = new ScriptedModel([
      { text: 'one program', toolCalls: [{ name: 'run_code', arguments: { code: "return (await tools.echo({ text: 'x' })).echoed", description: 'echo' } }] },
      { text: 'done' },
    ])
    const session = new AgentSession(ctx, { model, agent: coder })
    const outcome = await session.send('echo x')
    session.dispose()
    expect(outcome.reason).to.equal('done')
    const roots = tree(recorder.exporter.getFinishedSpans())
    expect(outline(roots, [ATTR.agent, ATTR.turn, ATTR.step, ATTR.toolCalls, ATTR.outcome])).to.deep.equal([
      'chat scripted [agent=coder turn=1 step=1 tool_calls=1]',
      'execute_tool run_code [agent=coder outcome=ok]',
      '  execute_tool echo [agent=coder outcome=ok]',
      'chat scripted [agent=coder turn=1 step=2 tool_calls=0]',
    ])
    expect(roots[0].attributes).to.include({ [ATTR.operation]: 'chat', [ATTR.model]: 'scripted', [ATTR.session]: session.id })
  })

  it('lets a call through when the tracer threw a value with no prototype, and says why it has no span', async () => {
    // a tracer is the deployer's SDK or exporter: it may throw anything, here what String() cannot read
    const unshowable = () => {
      throw Object.create(null)
    }
    trace.disable()
    trace.setGlobalTracerProvider({ getTracer: () => ({ startSpan: unshowable, startActiveSpan: unshowable }) } as never)
    const warnings: string[] = []
    const target = { levels: { base: 2 }, record: (record: { type: string; content: string }) => record.type === 'warn' && warnings.push(record.content) }
    Logger.targets.push(target as never)
    try {
      const ctx = await deploy({ mode: 'native' }, (ctx) => ctx.plugin(Otel, {}))
      ctx.tools.register(echoTool('echo'))
      expect((await call(ctx, 'echo', { text: 'a' })).isError).to.equal(false)
      expect(warnings).to.include('could not start the span of "echo": an error that could not be shown')
    } finally {
      Logger.targets.splice(Logger.targets.indexOf(target as never), 1)
    }
  })

  it('rejects a misspelt option', async () => {
    expect(() => Otel.Config({ stageEvent: false } as never)).to.throw(/stageEvent/)
  })
})
