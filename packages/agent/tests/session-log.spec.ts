import { appendFile, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { AgentSession, LOG_VERSION, type LogRecord, type Message, parseSessionLog, ScriptedModel, SessionLog, SessionLogError } from '@faber/agent'
import { assertStarted, defineTool, t } from '@faber/core'
import { deployment } from '@faber/core/testing'
import WorkerSandbox from '@faber/sandbox'
import { expect } from 'chai'
import type { Context } from 'cordis'
import { tempDir } from './helpers.ts'

async function records(path: string): Promise<LogRecord[]> {
  return parseSessionLog(await readFile(path, 'utf8')).records
}

function tools(ctx: Context, path?: string) {
  const seen: LogRecord['type'][][] = []
  ctx.tools.register(
    defineTool({
      name: 'note',
      description: 'returns its text; records what the log file holds when it runs',
      parameters: t.object({ text: t.string() }),
      output: { schema: t.string() },
      execute: async ({ text }) => {
        if (path) seen.push((await records(path)).map((r) => r.type))
        return text.toUpperCase()
      },
      isConcurrencySafe: () => true,
    }),
  )
  return seen
}

describe('session log', () => {
  let dir: string
  let cleanup: () => Promise<void>
  beforeEach(async () => ({ dir, cleanup } = await tempDir()))
  afterEach(() => cleanup())

  it('records turns, messages, calls and results, written by the end of every step', async () => {
    const path = join(dir, 'session.jsonl')
    const ctx = await deployment()
    const seen = tools(ctx, path)
    const log = await SessionLog.open(path)
    const model = new ScriptedModel([
      { toolCalls: [{ name: 'note', arguments: { text: 'a' } }] },
      { toolCalls: [{ name: 'note', arguments: { text: 'b' } }] },
      { text: 'done' },
    ])
    await new AgentSession(ctx, { model, log }).send('take notes')
    await log.close()
    // when the second step's call ran, the first step's result was already on disk
    expect(seen[1]).to.include('result')
    const types = (await records(path)).map((r) => r.type)
    expect(types).to.deep.equal([
      'session',
      'turn',
      'message',
      'model',
      'message',
      'call',
      'result',
      'message',
      'model',
      'message',
      'call',
      'result',
      'message',
      'model',
      'message',
      'turn-end',
    ])
  })

  it('records the version, and the value of each success (what a replay hands back)', async () => {
    const path = join(dir, 'session.jsonl')
    const ctx = await deployment()
    tools(ctx)
    const log = await SessionLog.open(path)
    const model = new ScriptedModel([{ toolCalls: [{ name: 'note', arguments: { text: 'a' } }] }, { text: 'done' }])
    await new AgentSession(ctx, { model, log }).send('take a note')
    await log.close()
    const all = await records(path)
    expect(all[0]).to.include({ type: 'session', version: LOG_VERSION })
    expect(LOG_VERSION).to.equal(3)
    expect(all.find((r) => r.type === 'result')).to.include({ isError: false, value: 'A' })
  })

  it('records nested run_code calls with their outer call', async () => {
    const path = join(dir, 'session.jsonl')
    const ctx = await deployment({ mode: 'code' })
    ctx.plugin(WorkerSandbox, {})
    await ctx.start()
    await assertStarted(ctx)
    tools(ctx)
    const log = await SessionLog.open(path)
    const code = 'const [a, b] = await Promise.all([tools.note({ text: "x" }), tools.note({ text: "y" })]); return a + b'
    const model = new ScriptedModel([{ toolCalls: [{ id: 'run1', name: 'run_code', arguments: { code, description: 'two notes' } }] }, { text: 'ok' }])
    const session = new AgentSession(ctx, { model, log })
    await session.send('go')
    await log.close()
    await ctx.stop()
    const all = await records(path)
    const nested = all.filter((r) => r.type === 'nested-call' || r.type === 'nested-result') as Extract<LogRecord, { type: 'nested-call' | 'nested-result' }>[]
    expect(nested.map((r) => [r.type, r.outerCallId, r.name])).to.have.deep.members([
      ['nested-call', 'run1', 'note'],
      ['nested-call', 'run1', 'note'],
      ['nested-result', 'run1', 'note'],
      ['nested-result', 'run1', 'note'],
    ])
    expect(nested.flatMap((r) => (r.type === 'nested-result' ? [r.value] : []))).to.have.members(['X', 'Y'])
    // where each call was made: line 1, at the column of each \`note\`
    expect(nested.flatMap((r) => (r.type === 'nested-call' ? [r.site] : []))).to.have.deep.members([
      { line: 1, column: 41 },
      { line: 1, column: 68 },
    ])
    const tool = session.messages.find((m) => m.role === 'tool')!
    expect(tool.content).to.equal('XY')
  })

  it('reloads a session and continues it', async () => {
    const path = join(dir, 'session.jsonl')
    {
      const ctx = await deployment()
      tools(ctx)
      const log = await SessionLog.open(path)
      const model = new ScriptedModel([{ toolCalls: [{ name: 'note', arguments: { text: 'remember me' } }] }, { text: 'noted' }])
      await new AgentSession(ctx, { model, log }).send('first')
      await log.close()
    }
    const ctx = await deployment()
    tools(ctx)
    const log = await SessionLog.open(path)
    expect(log.resumed).to.equal(true)
    let history: readonly Message[] = []
    const model = new ScriptedModel([
      ({ messages }) => {
        history = messages
        return { text: 'again' }
      },
    ])
    const session = new AgentSession(ctx, { model, log })
    const outcome = await session.send('second')
    await log.close()
    expect(outcome.turn).to.equal(2)
    expect(history.slice(1).map((m) => m.content)).to.deep.equal(['first', '', 'REMEMBER ME', 'noted', 'second'])
    const all = await records(path)
    expect(all.filter((r) => r.type === 'turn').map((r) => (r as { turn: number }).turn)).to.deep.equal([1, 2])
    expect(all.some((r) => r.type === 'resume')).to.equal(true)
  })

  it('reports and cuts off a truncated last line, then continues', async () => {
    const path = join(dir, 'session.jsonl')
    {
      const ctx = await deployment()
      const log = await SessionLog.open(path)
      await new AgentSession(ctx, { model: new ScriptedModel([{ text: 'hello' }]), log }).send('hi')
      await log.close()
    }
    await appendFile(path, '{"type":"message","turn":2,"message":{"role":"user","con')
    const log = await SessionLog.open(path)
    expect(log.truncated?.text).to.match(/^\{"type":"message"/)
    expect(log.truncated?.line).to.equal(7)
    const ctx = await deployment()
    const session = new AgentSession(ctx, { model: new ScriptedModel([{ text: 'back' }]), log })
    expect(session.messages.map((m) => m.content)).to.deep.equal(['hi', 'hello'])
    await session.send('still there?')
    await log.close()
    const parsed = parseSessionLog(await readFile(path, 'utf8'))
    expect(parsed.truncated).to.equal(undefined)
    const resume = parsed.records.find((r) => r.type === 'resume') as Extract<LogRecord, { type: 'resume' }>
    expect(resume.skipped?.line).to.equal(7)
  })

  it('refuses a log corrupted before its last line', async () => {
    const path = join(dir, 'session.jsonl')
    await writeFile(path, '{"type":"session","version":1,"id":"x","model":"m","at":1}\nnot json\n{"type":"turn","turn":1,"at":2}\n')
    let error: unknown
    await SessionLog.open(path).catch((e) => (error = e))
    expect(error).to.be.instanceOf(SessionLogError)
    expect(String(error)).to.include('session.jsonl:2')
  })

  it('answers calls left without a result by a crash as interrupted', async () => {
    const path = join(dir, 'session.jsonl')
    const lines = [
      { type: 'session', version: 1, id: 'x', model: 'scripted', at: 1 },
      { type: 'turn', turn: 1, at: 2 },
      { type: 'message', turn: 1, message: { role: 'user', content: 'write it' }, at: 3 },
      { type: 'message', turn: 1, message: { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'note', arguments: '{}' }] }, at: 4 },
    ]
    await writeFile(path, lines.map((l) => `${JSON.stringify(l)}\n`).join(''))
    const ctx = await deployment()
    const log = await SessionLog.open(path)
    const session = new AgentSession(ctx, { model: new ScriptedModel([{ text: 'ok' }]), log })
    const last = session.messages.at(-1) as Extract<Message, { role: 'tool' }>
    expect(last).to.include({ role: 'tool', toolCallId: 'c1', isError: true })
    expect(last.content).to.match(/stopped before the result/)
    await log.close()
  })
})
