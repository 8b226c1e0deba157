import { copyFile, mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { mock } from 'node:test'
import { AgentSession, ScriptedModel, SessionLog } from '@faber/agent'
import { waitOnPerson } from '@faber/core'
import { call, deferred, deployment, disposeAll } from '@faber/core/testing'
import Approval, { type ElicitationAnswer, type ElicitationDecided, type ElicitationQuery } from '@faber/plugin-approval'
import WorkerSandbox from '@faber/sandbox'
import { expect } from 'chai'
import type { Context } from 'cordis'
import * as mcp from '../src/index.ts'
import { fixtureServer } from './helpers.ts'

type Answerer = (query: ElicitationQuery) => ElicitationAnswer | undefined | Promise<ElicitationAnswer | undefined>

/** a deployment importing the asking server, with the approval service and one form answerer */
async function asking(
  answer: Answerer | undefined,
  options: { mode?: 'native' | 'code'; timeoutMs?: number; elicitationTimeoutMs?: number; wallMs?: number; checkpointAfterMs?: number } = {},
) {
  const asked: ElicitationQuery[] = []
  const decided: ElicitationDecided[] = []
  const { mode = 'native', wallMs, checkpointAfterMs } = options
  const ctx = await deployment({ mode, codeLimits: wallMs ? { wallMs } : {}, ...(checkpointAfterMs ? { checkpointAfterMs } : {}) }, (ctx) => {
    if (options.mode === 'code') ctx.plugin(WorkerSandbox, { poolSize: 1 })
    ctx.plugin(Approval, { require: [], elicitationTimeoutMs: options.elicitationTimeoutMs })
    if (answer)
      ctx.plugin({
        name: 'form-answerer',
        apply: (inner: Context) =>
          inner.on('approval/elicit', (query) => {
            asked.push(query)
            return answer(query)
          }),
      })
    ctx.on('approval/elicited', (event) => void decided.push(event))
    ctx.plugin(mcp, { servers: [fixtureServer('asking', 'asking-server.ts', { timeoutMs: options.timeoutMs })] })
  })
  return { ctx, asked, decided, call: (name: string, args: Record<string, unknown> = {}) => call(ctx, name, args) }
}

describe('mcp client: elicitation and sampling from imported servers', function () {
  this.timeout(30000)

  describe('one deployment, answers varied', () => {
    let answer: Answerer = () => ({ action: 'accept' })
    let deployed: Awaited<ReturnType<typeof asking>>
    before(async () => (deployed = await asking((query) => answer(query))))
    beforeEach(() => {
      deployed.asked.length = 0
      deployed.decided.length = 0
    })
    after(disposeAll)

    it("applies the schema's defaults when the answerer accepts without changes, and audits the answer", async () => {
      answer = () => ({ action: 'accept' })
      const { asked, decided, call } = deployed
      const result = await call('asking__ask')
      expect(result.isError).to.equal(false)
      expect(JSON.parse(result.content)).to.deep.equal({ action: 'accept', content: { name: 'John Doe', age: 30, status: 'active', verified: true } })
      expect(asked).to.have.length(1)
      expect(asked[0]).to.deep.include({ source: 'MCP server "asking"', message: 'Who are you?', during: ['asking__ask'] })
      expect(decided).to.have.length(1)
      expect(decided[0]).to.deep.include({
        source: 'MCP server "asking"',
        action: 'accept',
        answeredBy: 'form-answerer',
        fields: ['name', 'age', 'status', 'verified'],
        defaulted: ['name', 'age', 'status', 'verified'],
      })
    })

    it("keeps the answerer's values, and cancels an answer that does not fit the schema", async () => {
      let content: Record<string, unknown> = { name: 'Ada', age: 36, nickname: 'countess' }
      answer = () => ({ action: 'accept', content: content as never })
      const { decided, call } = deployed
      const kept = JSON.parse((await call('asking__ask')).content)
      expect(kept).to.deep.equal({ action: 'accept', content: { name: 'Ada', age: 36, status: 'active', verified: true, nickname: 'countess' } })
      content = { age: 'old' }
      expect(JSON.parse((await call('asking__ask')).content)).to.deep.equal({ action: 'cancel' })
      expect(decided[1].note).to.equal('the answer was not accepted: field "age": expected a number')
    })

    it('honours decline and cancel, and cancels when nobody answers', async () => {
      let action: 'decline' | 'cancel' | undefined = 'decline'
      answer = () => (action ? { action } : undefined)
      const { decided, call } = deployed
      expect(JSON.parse((await call('asking__ask')).content)).to.deep.equal({ action: 'decline' })
      action = 'cancel'
      expect(JSON.parse((await call('asking__ask')).content)).to.deep.equal({ action: 'cancel' })
      action = undefined
      expect(JSON.parse((await call('asking__ask')).content)).to.deep.equal({ action: 'cancel' })
      expect(decided.map((event) => `${event.action} by ${event.answeredBy}`)).to.deep.equal([
        'decline by form-answerer',
        'cancel by form-answerer',
        'cancel by none',
      ])
    })

    it('refuses sampling with the reason', async () => {
      const { call } = deployed
      const result = await call('asking__sample')
      expect(result.content).to.equal('refused: MCP error -32600: sampling is not available: this Faber deployment configures no model for its MCP servers')
    })
  })

  describe('deployments of their own', () => {
    afterEach(disposeAll)

    it('cancels at the deadline and withdraws the question from the answerer', async () => {
      let withdrawn = false
      const { decided, call } = await asking(
        (query) =>
          new Promise<undefined>((resolve) =>
            query.signal.addEventListener('abort', () => {
              withdrawn = true
              resolve(undefined)
            }),
          ),
        { elicitationTimeoutMs: 50 },
      )
      expect(JSON.parse((await call('asking__ask')).content)).to.deep.equal({ action: 'cancel' })
      expect(withdrawn).to.equal(true)
      expect(decided[0]).to.deep.include({ action: 'cancel', answeredBy: 'deadline', note: 'no answer within 50 ms' })
    })

    it('inside run_code, the nested call waits for the answer like an approval, its time budget paused', async () => {
      const answered = deferred()
      const question = deferred()
      const { call } = await asking(
        async () => {
          question.resolve()
          await answered.promise
          return { action: 'accept', content: { name: 'Grace' } }
        },
        { mode: 'code', timeoutMs: 1000 },
      )
      // the server's budget (1 s) runs on fake timers from the call's start: the answer comes after it, and the call
      // must not time out meanwhile
      mock.timers.enable({ apis: ['setTimeout'] })
      try {
        const program = call('run_code', { code: 'const r = await tools.asking__ask({}); return r', description: 'asks who' })
        await question.promise
        mock.timers.tick(1300)
        answered.resolve()
        const result = await program
        expect(result.isError, result.content).to.equal(false)
        expect(result.content).to.include('"name":"Grace"')
      } finally {
        mock.timers.reset()
      }
    })

    it("inside run_code, a person's answer does not count against the program's wall-clock budget", async () => {
      const { call, asked } = await asking(
        async (query) => {
          // a person answers this form: the programs that made the calls it came during stop their clocks
          const answered = waitOnPerson(...(query.calls ?? []))
          await new Promise((resolve) => setTimeout(resolve, 700))
          answered()
          return { action: 'accept', content: { name: 'Grace' } }
        },
        { mode: 'code', timeoutMs: 5000, wallMs: 500 },
      )
      const result = await call('run_code', { code: 'const r = await tools.asking__ask({}); return r', description: 'asks who' })
      expect(result.isError, result.content).to.equal(false)
      expect(result.content).to.include('"name":"Grace"')
      expect(asked[0].calls?.map((exec) => exec.name)).to.deep.equal(['asking__ask'])
    })

    it('inside run_code, a form still open when the process stops survives no restart: the call to the server may have run', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'faber-form-restart-'))
      try {
        // the person never answers the form: the program is checkpointed into the session log, and the process "crashes"
        const first = await asking(
          (query) => {
            const answered = waitOnPerson(...(query.calls ?? []))
            return new Promise<undefined>((resolve) =>
              query.signal.addEventListener('abort', () => {
                answered()
                resolve(undefined)
              }),
            )
          },
          { mode: 'code', checkpointAfterMs: 100 },
        )
        const log = await SessionLog.open(join(dir, 'live.jsonl'))
        const code = 'return await tools.asking__ask({})'
        const model = new ScriptedModel([
          { toolCalls: [{ id: 'run1', name: 'run_code', arguments: { code, description: 'asks who' } }] },
          { text: 'not reached' },
        ])
        const session = new AgentSession(first.ctx, { model, log })
        const stop = new AbortController()
        const turn = session.send('who am I?', { signal: stop.signal })
        while (!(await readFile(log.path, 'utf8')).includes('"type":"checkpoint"')) await new Promise((resolve) => setTimeout(resolve, 10))
        await copyFile(log.path, join(dir, 'crashed.jsonl'))
        stop.abort()
        await turn
        await log.close()
        // the new process has a person who would answer at once, but the form was the old server call's
        const second = await asking(() => ({ action: 'accept', content: { name: 'Grace' } }), { mode: 'code', checkpointAfterMs: 100 })
        const again = await SessionLog.open(join(dir, 'crashed.jsonl'))
        const resumed = new AgentSession(second.ctx, { model: new ScriptedModel([{ text: 'told' }]), log: again })
        expect(resumed.checkpointed).to.deep.equal(['run1'])
        await resumed.resume()
        await again.close()
        const told = resumed.messages.find((m) => m.role === 'tool' && m.toolCallId === 'run1')
        expect(told?.content).to.include('run_code failed (interrupted)').and.include('tools.asking__ask({})')
        expect(second.asked, 'the server is not called again, so it asks nothing').to.have.length(0)
      } finally {
        await rm(dir, { recursive: true, force: true })
      }
    })

    it('cancels when no approval service is loaded', async () => {
      const ctx = await deployment({ mode: 'native' }, (ctx) => ctx.plugin(mcp, { servers: [fixtureServer('asking', 'asking-server.ts')] }))
      const result = await call(ctx, 'asking__ask', {})
      expect(JSON.parse(result.content)).to.deep.equal({ action: 'cancel' })
    })
  })
})
