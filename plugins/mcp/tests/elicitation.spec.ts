import Approval, { type ElicitationAnswer, type ElicitationDecided, type ElicitationQuery } from '@faber/plugin-approval'
import WorkerSandbox from '@faber/sandbox'
import { expect } from 'chai'
import type { Context } from 'cordis'
import * as mcp from '../src/index.ts'
import { callId, deployment, fixtureServer, signal, stopAll } from './helpers.ts'

type Answerer = (query: ElicitationQuery) => ElicitationAnswer | undefined | Promise<ElicitationAnswer | undefined>

/** a deployment importing the asking server, with the approval service and one form answerer */
async function asking(answer: Answerer | undefined, options: { mode?: 'native' | 'code'; timeoutMs?: number; elicitationTimeoutMs?: number } = {}) {
  const ctx = await deployment(options.mode ?? 'native')
  if (options.mode === 'code') ctx.plugin(WorkerSandbox, { poolSize: 1 })
  ctx.plugin(Approval, { require: [], elicitationTimeoutMs: options.elicitationTimeoutMs })
  const asked: ElicitationQuery[] = []
  const decided: ElicitationDecided[] = []
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
  await ctx.start()
  const call = async (name: string, args: Record<string, unknown> = {}) => {
    const result = await ctx.tools.execute({ callId: callId(), name, arguments: args, signal: signal() })
    return result
  }
  return { ctx, asked, decided, call }
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
    after(stopAll)

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
    afterEach(stopAll)

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
      let release!: () => void
      const answered = new Promise<void>((resolve) => (release = resolve))
      let asked!: () => void
      const question = new Promise<void>((resolve) => (asked = resolve))
      // the server's budget is 1 s; the answer comes after it (real time must pass), and the call must not time out meanwhile
      const { call } = await asking(
        async () => {
          asked()
          await answered
          return { action: 'accept', content: { name: 'Grace' } }
        },
        { mode: 'code', timeoutMs: 1000 },
      )
      const program = call('run_code', { code: 'const r = await tools.asking__ask({}); return r', description: 'asks who' })
      await question
      await new Promise((resolve) => setTimeout(resolve, 1300))
      release()
      const result = await program
      expect(result.isError, result.content).to.equal(false)
      expect(result.content).to.include('"name":"Grace"')
    })

    it('cancels when no approval service is loaded', async () => {
      const ctx = await deployment('native')
      ctx.plugin(mcp, { servers: [fixtureServer('asking', 'asking-server.ts')] })
      await ctx.start()
      const result = await ctx.tools.execute({ callId: callId(), name: 'asking__ask', arguments: {}, signal: signal() })
      expect(JSON.parse(result.content)).to.deep.equal({ action: 'cancel' })
    })
  })
})
