import { execFile } from 'node:child_process'
import { mock } from 'node:test'
import { fileURLToPath } from 'node:url'
import { type ApprovalRequest, assertStarted, TIMED_OUT, type ToolResult, type ToolRuntime } from '@faber/core'
import { call as callTool, deferred, deployment as deploy, disposeAll, echoTool } from '@faber/core/testing'
import { expect } from 'chai'
import type { Context } from 'cordis'
import { DeadlineQueue } from '../src/deadline.ts'
import './helpers.ts'

const never = () => new Promise<never>(() => {})
const turn = () => new Promise<void>((resolve) => setImmediate(resolve))

async function deployment(config: ToolRuntime.ConfigInput = {}) {
  const ctx = await deploy(config)
  let ran = 0
  ctx.tools.register(echoTool('echo', { onRun: () => ran++ }))
  return { ctx, ran: () => ran }
}

const call = (ctx: Context) => callTool(ctx, 'echo', { text: 'hi' })

describe('bounded waits', () => {
  beforeEach(() => mock.timers.enable({ apis: ['setTimeout', 'Date'] }))
  afterEach(async () => {
    mock.timers.reset()
    await disposeAll()
  })

  it('a tools/pre-execute listener that never answers fails closed at the default deadline (30 s)', async () => {
    const { ctx, ran } = await deployment()
    ctx.plugin({ name: 'stuck', inject: ['tools'], apply: (c: Context) => c.tools.listen('tools/pre-execute', never) })
    await assertStarted(ctx)
    let result: ToolResult | undefined
    call(ctx).then((r) => (result = r))
    await turn()
    mock.timers.tick(29_999)
    await turn()
    expect(result).to.equal(undefined)
    mock.timers.tick(1)
    await turn()
    expect(result?.isError && result.error).to.deep.include({
      code: 'DENIED',
      message: 'the call to "echo" was denied because a tools/pre-execute listener of plugin "stuck" did not answer within 30 s',
      deniedBy: { stage: 'pre-execute', plugin: 'stuck' },
    })
    expect(result?.trace).to.deep.include({ stage: 'pre-execute', decision: 'timed-out', by: 'stuck', reason: result?.isError && result.error.message })
    expect(ran()).to.equal(0)
  })

  it('the deadline is configurable, and a listener that answers in time is unaffected', async () => {
    const { ctx, ran } = await deployment({ preExecuteTimeoutMs: 500 })
    let slow = true
    ctx.plugin({
      name: 'slow',
      inject: ['tools'],
      apply: (c: Context) => c.tools.listen('tools/pre-execute', () => new Promise((resolve) => setTimeout(() => resolve(undefined), slow ? 600 : 400))),
    })
    await assertStarted(ctx)
    let result: ToolResult | undefined
    call(ctx).then((r) => (result = r))
    await turn()
    mock.timers.tick(500)
    await turn()
    expect(result?.isError && result.error.message).to.contain('did not answer within 500 ms')
    slow = false
    let second: ToolResult | undefined
    call(ctx).then((r) => (second = r))
    await turn()
    mock.timers.tick(400)
    await turn()
    await turn()
    expect(second?.isError).to.equal(false)
    expect(ran()).to.equal(1)
  })

  it('a tools/post-execute listener that never answers fails closed at its deadline: the result is withheld', async () => {
    const { ctx, ran } = await deployment({ postExecuteTimeoutMs: 2_000 })
    ctx.plugin({ name: 'stuck-after', inject: ['tools'], apply: (c: Context) => c.tools.listen('tools/post-execute', never) })
    await assertStarted(ctx)
    let result: ToolResult | undefined
    call(ctx).then((r) => (result = r))
    await turn()
    mock.timers.tick(1_999)
    await turn()
    expect(result).to.equal(undefined)
    mock.timers.tick(1)
    await turn()
    expect(result?.isError && result.error).to.deep.include({
      code: 'RESULT_WITHHELD',
      message:
        '"echo" ran, but its result was withheld because a tools/post-execute listener of plugin "stuck-after" did not answer within 2 s; ' +
        'it may have taken effect, so check before calling it again',
      withheldBy: { stage: 'post-execute', plugin: 'stuck-after' },
    })
    expect(result?.trace?.at(-1)).to.deep.include({ stage: 'post-execute', decision: 'timed-out', by: 'stuck-after' })
    expect(ran()).to.equal(1)
  })

  it('an approval service that never answers is denied at the deadline, and its request signal aborts', async () => {
    const { ctx, ran } = await deployment({ approvalTimeoutMs: 60_000 })
    const requests: ApprovalRequest[] = []
    ctx.plugin({ name: 'asker', inject: ['tools'], apply: (c: Context) => c.tools.listen('tools/pre-execute', () => ({ kind: 'ask', reason: 'check' })) })
    ctx.set('approval', {
      request: (request: ApprovalRequest) => {
        requests.push(request)
        return never()
      },
    })
    await assertStarted(ctx)
    let result: ToolResult | undefined
    call(ctx).then((r) => (result = r))
    await turn()
    expect(requests).to.have.length(1)
    mock.timers.tick(60_000)
    await turn()
    expect(result?.isError && result.error).to.deep.include({ code: 'DENIED', deniedBy: { stage: 'approval', plugin: 'approval' } })
    expect(result?.content).to.contain('needs approval (check) but no answer came in time, so it was denied')
    expect(result?.trace?.at(-1)).to.deep.include({ stage: 'approval', decision: 'timed-out' })
    expect(requests[0].signal.aborted).to.equal(true)
    expect(ran()).to.equal(0)
  })

  it('one shared timer times out each wait of a queue at its own deadline, and never a settled one', async () => {
    const queue = new DeadlineQueue(1_000)
    const outcomes: Record<string, unknown> = {}
    const track = (name: string, value: PromiseLike<unknown>) => queue.race(value).then((v) => (outcomes[name] = v))
    track('a', never())
    mock.timers.tick(400)
    track('b', new Promise((resolve) => setTimeout(() => resolve('b answered'), 200)))
    mock.timers.tick(100)
    track('c', never())
    mock.timers.tick(100)
    await turn()
    expect(outcomes).to.deep.equal({ b: 'b answered' })
    mock.timers.tick(400)
    await turn()
    expect(outcomes).to.deep.equal({ a: TIMED_OUT, b: 'b answered' })
    mock.timers.tick(499)
    await turn()
    expect(outcomes.c).to.equal(undefined)
    mock.timers.tick(1)
    await turn()
    expect(outcomes).to.deep.equal({ a: TIMED_OUT, b: 'b answered', c: TIMED_OUT })
  })
})

describe('bounded waits hold the process only while something waits', function () {
  // a child process on a loaded machine; nothing here is timed
  this.timeout(120_000)
  afterEach(() => disposeAll())

  it('a call held by a listener that never settles is answered at the deadline before the process may exit', async () => {
    const fixture = fileURLToPath(new URL('./fixtures/stuck-listener.ts', import.meta.url))
    const ran = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, ['--import', 'tsx/esm', fixture, '300'], (error, stdout, stderr) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr }),
      )
    })
    expect(ran.code, ran.stderr).to.equal(0)
    expect(JSON.parse(ran.stdout)).to.deep.equal({
      code: 'DENIED',
      deniedBy: { stage: 'pre-execute', plugin: 'stuck' },
      message: 'the call to "echo" was denied because a tools/pre-execute listener of plugin "stuck" did not answer within 300 ms',
    })
  })

  it('once every wait has settled, the shared deadline timer no longer keeps the process alive', async () => {
    const { ctx } = await deployment()
    const answer = deferred<undefined>()
    ctx.plugin({ name: 'later', inject: ['tools'], apply: (c: Context) => c.tools.listen('tools/pre-execute', () => answer.promise) })
    await assertStarted(ctx)
    const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length
    const before = timers()
    const pending = call(ctx)
    await turn()
    expect(timers(), 'a pending wait holds the process').to.equal(before + 1)
    answer.resolve(undefined)
    expect((await pending).isError).to.equal(false)
    expect(timers(), 'nothing waits: nothing held').to.equal(before)
    const again = deferred<undefined>()
    ctx.plugin({ name: 'again', inject: ['tools'], apply: (c: Context) => c.tools.listen('tools/pre-execute', () => again.promise) })
    await assertStarted(ctx)
    const second = call(ctx)
    await turn()
    expect(timers(), 'the next wait holds it again').to.equal(before + 1)
    again.resolve(undefined)
    await second
  })
})
