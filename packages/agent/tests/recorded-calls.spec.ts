import { appendFile, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import {
  AgentSession,
  checkpointsOf,
  RecordedCallsError,
  type RecordedEvent,
  recordedCalls,
  ScriptedModel,
  SessionLog,
  streamRecordedCalls,
} from '@faber/agent'
import { assertStarted, defineTool, t } from '@faber/core'
import { deployment } from '@faber/core/testing'
import WorkerSandbox from '@faber/sandbox'
import { expect } from 'chai'
import { tempDir } from './helpers.ts'

async function collect(events: AsyncIterable<RecordedEvent>) {
  const out: RecordedEvent[] = []
  for await (const event of events) out.push(event)
  return out
}

describe('recorded calls', () => {
  let dir: string
  let cleanup: () => Promise<void>
  beforeEach(async () => ({ dir, cleanup } = await tempDir()))
  afterEach(() => cleanup())

  /** a real session in code mode: a run_code with two nested calls, then (after a resume) a direct call that collapses */
  async function recorded() {
    const path = join(dir, 'session.jsonl')
    const ctx = await deployment({ mode: 'code' })
    ctx.plugin(WorkerSandbox, {})
    await ctx.start()
    await assertStarted(ctx)
    ctx.tools.register(
      defineTool({
        name: 'note',
        description: 'returns its text in capitals',
        parameters: t.object({ text: t.string() }),
        output: { schema: t.string() },
        execute: async ({ text }) => text.toUpperCase(),
      }),
    )
    const code = 'const a = await tools.note({ text: "x" })\nreturn a + (await tools.note({ text: "y" }))'
    for (const script of [
      [{ toolCalls: [{ id: 'run1', name: 'run_code', arguments: { code, description: 'two notes' } }] }, { text: 'ok' }],
      [{ toolCalls: [{ id: 'direct', name: 'note', arguments: { text: 'z' } }] }, { text: 'ok' }],
    ]) {
      const log = await SessionLog.open(path)
      const session = new AgentSession(ctx, { model: new ScriptedModel(script), log })
      await session.send('go')
      session.dispose()
      await log.close()
    }
    await ctx.stop()
    return path
  }

  it('reads each step’s calls with their nested calls, sites and outcomes, the same from a file stream and from loaded records', async () => {
    const path = await recorded()
    await appendFile(path, '{"type":"audit","turn":2,"at":1}\n')
    const streamed = await collect(streamRecordedCalls(path))
    const log = await SessionLog.open(path)
    await log.close()
    expect(recordedCalls(log.records, path)).to.deep.equal(streamed)
    expect(streamed.map((e) => e.kind)).to.deep.equal(['session', 'turn', 'step', 'resume', 'turn', 'step', 'other'])
    const [first, second] = streamed.filter((e) => e.kind === 'step').map((e) => e.calls)
    expect(first).to.have.length(1)
    expect(first[0]).to.include({ callId: 'run1', name: 'run_code', turn: 1 })
    expect(first[0].outcome).to.deep.include({ isError: false, value: { logs: [], result: 'XY' } })
    expect(first[0].nested.map((n) => [n.name, n.arguments, n.site?.line, n.outcome?.value])).to.deep.equal([
      ['note', { text: 'x' }, 1, 'X'],
      ['note', { text: 'y' }, 2, 'Y'],
    ])
    // a model-direct call under code mode ends at create: recorded as UNKNOWN_TOOL with its trace
    expect(second[0]).to.include({ callId: 'direct', name: 'note' })
    expect(second[0].outcome).to.include({ isError: true, code: 'UNKNOWN_TOOL' })
    expect(streamed.at(-1)).to.include({ kind: 'other', type: 'audit' })
  })

  it('refuses LOG_VERSION 1 by name, and names the line of a forged record', async () => {
    const path = await recorded()
    const text = await readFile(path, 'utf8')
    await writeFile(path, text.replace('"version":3', '"version":1'))
    const error = await collect(streamRecordedCalls(path)).catch((caught) => caught)
    expect(error).to.be.instanceOf(RecordedCallsError)
    expect(error.message).to.match(/:1: this log was written at LOG_VERSION 1, which records no result values/)
    const lines = text.split('\n')
    const at = lines.findIndex((line) => line.includes('"type":"nested-call"'))
    lines[at] = lines[at].replace('"outerCallId":"run1"', '"outerCallId":"elsewhere"')
    expect(() =>
      recordedCalls(
        lines.filter(Boolean).map((line) => JSON.parse(line)),
        path,
      ),
    ).to.throw(RecordedCallsError, `session.jsonl:${at + 1}: a nested call whose run_code (outerCallId) is not a call of this step`)
  })

  it('a program checkpointed while it waited, then run again after a resume, is one call: its nested calls of both runs, its result', () => {
    const outcome = (value: unknown) => ({ isError: false, value, durationMs: 1 })
    const records = [
      { type: 'session', version: 3, id: 's', model: 'm', at: 1 },
      { type: 'turn', turn: 1, at: 1 },
      { type: 'call', turn: 1, step: 1, call: { id: 'run1', name: 'run_code', arguments: '{"code":"…"}' }, mode: 'exclusive', at: 1 },
      { type: 'nested-call', turn: 1, outerCallId: 'run1', callId: 'run1/1', name: 'write', arguments: { path: 'a' }, at: 1 },
      { type: 'nested-result', turn: 1, outerCallId: 'run1', callId: 'run1/1', name: 'write', content: 'ok', ...outcome('ok'), at: 1 },
      { type: 'nested-call', turn: 1, outerCallId: 'run1', callId: 'run1/2', name: 'deploy', arguments: {}, at: 1 },
      { type: 'approval', turn: 1, event: 'approval/asked', callId: 'run1/2', tool: 'deploy', detail: {}, at: 1 },
      {
        type: 'checkpoint',
        turn: 1,
        outerCallId: 'run1',
        calls: [
          { callId: 'run1/1', name: 'write', arguments: '{"path":"a"}', reply: { ok: true, value: '"ok"' } },
          { callId: 'run1/2', name: 'deploy', arguments: '{}' },
        ],
        values: [5],
        sequence: 2,
        at: 1,
      },
      { type: 'journal', turn: 1, outerCallId: 'run1', values: [6], at: 1 },
    ]
    // the process stopped there: a new one finds the program to run again, the call it waited on not unsure (a person was being asked)
    const waiting = checkpointsOf(records).get('run1')
    expect(waiting).to.deep.include({ outerCallId: 'run1', turn: 1, unsure: [] })
    expect(waiting?.checkpoint).to.deep.include({ values: [5, 6], sequence: 2 })
    // it resumed: the program ran again, the call it waited on was made live and the program finished
    const resumed = [
      ...records,
      { type: 'resume', turns: 1, at: 2 },
      { type: 'nested-call', turn: 1, outerCallId: 'run1', callId: 'run1/3', name: 'deploy', arguments: {}, at: 2 },
      { type: 'nested-result', turn: 1, outerCallId: 'run1', callId: 'run1/3', name: 'deploy', content: 'done', ...outcome('done'), at: 2 },
      { type: 'result', turn: 1, callId: 'run1', name: 'run_code', ...outcome({ result: 'done' }), at: 2 },
      { type: 'model', turn: 1, step: 2, model: 'm', durationMs: 1, at: 2 },
    ]
    expect(checkpointsOf(resumed).size).to.equal(0)
    const events = recordedCalls(resumed)
    expect(events.map((e) => e.kind)).to.deep.equal(['session', 'turn', 'resume', 'step'])
    const [call] = (events[3] as Extract<RecordedEvent, { kind: 'step' }>).calls
    expect(call.outcome).to.deep.include({ isError: false, value: { result: 'done' } })
    expect(call.nested.map((n) => [n.callId, n.outcome?.value])).to.deep.equal([
      ['run1/1', 'ok'],
      ['run1/2', undefined],
      ['run1/3', 'done'],
    ])
    // a journal for a call no step is running is forged
    expect(() => recordedCalls([...records.slice(0, 2), { type: 'journal', turn: 1, outerCallId: 'elsewhere', values: [1], at: 1 }])).to.throw(
      RecordedCallsError,
      ':3: a journal whose run_code (outerCallId) is not a running call of this step',
    )
  })
})
