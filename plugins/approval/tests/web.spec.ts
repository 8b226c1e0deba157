import { defineTool, t } from '@faber/core'
import { call, deployment as deploy, disposeAll } from '@faber/core/testing'
import Approval, { type ApprovalAsked, type ApprovalDecided, WEB_ANSWERER, WebAnswerer, type WebAnswererChange } from '@faber/plugin-approval'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'

Logger.levels.base = 0

async function deployment(web: Partial<WebAnswerer.Config> = {}) {
  const ctx = await deploy({}, (ctx) => {
    ctx.plugin(Approval, { require: ['deploy'] })
    ctx.plugin(WebAnswerer, web)
  })
  ctx.tools.register(
    defineTool({
      name: 'deploy',
      description: 'deploys',
      parameters: t.object({ target: t.string() }),
      output: { schema: t.string() },
      execute: ({ target }) => `deployed to ${target}`,
    }),
  )
  const audit = { asked: [] as ApprovalAsked[], decided: [] as ApprovalDecided[], changes: [] as WebAnswererChange[] }
  ctx.on('approval/asked', (event) => {
    audit.asked.push(event)
  })
  ctx.on('approval/decided', (event) => {
    audit.decided.push(event)
  })
  ctx.approvalWeb.watch((change) => audit.changes.push(change))
  return { ctx, audit }
}

/** resolves once the web answerer holds a request */
function waiting(ctx: Context): Promise<string> {
  return new Promise((resolve) => {
    const stop = ctx.approvalWeb.watch((change) => {
      if (change.kind !== 'waiting') return
      stop()
      resolve(change.query.id)
    })
  })
}

const deployTo = (ctx: Context, signal?: AbortSignal) => call(ctx, 'deploy', { target: 'staging' }, { signal })

describe('the web answerer', () => {
  afterEach(disposeAll)

  it('holds a request until answered, and the service audits it as approval-web', async () => {
    const { ctx, audit } = await deployment()
    const held = waiting(ctx)
    const pending = deployTo(ctx)
    const id = await held
    expect(ctx.approvalWeb.pending().map((query) => query.tool)).to.deep.equal(['deploy'])
    expect(ctx.approvalWeb.answer(id, { decision: 'allow', from: '127.0.0.1' })).to.equal(true)
    const result = await pending
    expect(result.isError).to.equal(false)
    expect(audit.asked.map((event) => event.id)).to.deep.equal([id])
    expect(audit.decided.map((event) => [event.outcome, event.answeredBy, event.note])).to.deep.equal([
      ['allowed', WEB_ANSWERER, 'answered on the web view from 127.0.0.1'],
    ])
    expect(audit.changes.map((change) => change.kind)).to.deep.equal(['waiting', 'settled'])
    expect(ctx.approvalWeb.pending()).to.deep.equal([])
    expect(ctx.approvalWeb.answer(id, { decision: 'allow' })).to.equal(false)
  })

  it('a rejection denies the call; a session answer records a grant', async () => {
    const { ctx } = await deployment()
    let held = waiting(ctx)
    let pending = deployTo(ctx)
    ctx.approvalWeb.answer(await held, { decision: 'reject' })
    const denied = await pending
    expect(denied.isError && denied.error.code).to.equal('DENIED')
    held = waiting(ctx)
    pending = deployTo(ctx)
    ctx.approvalWeb.answer(await held, { decision: 'allow', remember: 'session' })
    expect((await pending).isError).to.equal(false)
    expect((await (ctx.approval as Approval).grants()).map((grant) => [grant.tool, grant.scope, grant.by])).to.deep.equal([['deploy', 'session', WEB_ANSWERER]])
  })

  it('lets go of a cancelled request, and refuses what it does not offer', async () => {
    const { ctx, audit } = await deployment({ remember: [] })
    const controller = new AbortController()
    const held = waiting(ctx)
    const pending = deployTo(ctx, controller.signal)
    const id = await held
    expect(() => ctx.approvalWeb.answer(id, { decision: 'allow', remember: 'session' })).to.throw(/not offered/)
    expect(() => ctx.approvalWeb.answer(id, { decision: 'maybe' as 'allow' })).to.throw(/allow" or "reject/)
    controller.abort()
    const result = await pending
    expect(result.isError && result.error.code).to.equal('ABORTED_BEFORE_DISPATCH')
    expect(ctx.approvalWeb.pending()).to.deep.equal([])
    expect(audit.decided.map((event) => event.outcome)).to.deep.equal(['cancelled'])
  })

  it('goes on when a watcher throws something with no message to read (no prototype, a revoked proxy)', async () => {
    const { ctx, audit } = await deployment()
    const revoked = Proxy.revocable({}, {})
    revoked.revoke()
    ctx.approvalWeb.watch(() => {
      throw Object.create(null)
    })
    ctx.approvalWeb.watch(() => {
      throw revoked.proxy
    })
    const held = waiting(ctx)
    const pending = deployTo(ctx)
    ctx.approvalWeb.answer(await held, { decision: 'allow' })
    expect((await pending).isError).to.equal(false)
    expect(audit.changes.map((change) => change.kind)).to.deep.equal(['waiting', 'settled'])
  })
})
