import { assertStarted, type BridgeReply, type CodeRunRequest, type CodeRuntime, createAgent, defineTool, type ToolResult, t } from '@faber/core'
import * as kit from '@faber/core/testing'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'
import * as SecretsGuard from '../src/index.ts'

Logger.levels.base = 0

const KEY = `sk-${'a'.repeat(32)}`

async function deployment(mode: 'native' | 'code' = 'native') {
  const ctx = await kit.deployment({ mode })
  const runs: unknown[] = []
  ctx.tools.register(
    defineTool({
      name: 'fetch',
      description: 'returns what it is told to',
      parameters: t.object({ url: t.string(), headers: t.record(t.string()).optional(), reply: t.string().optional() }),
      output: { schema: t.object({ body: t.string(), lines: t.array(t.string()) }), render: (_, v) => v.body },
      execute: (args) => {
        runs.push(args)
        if (args.reply === 'fail') throw new Error(`upstream refused key ${KEY}`)
        // 'leak' answers with secrets the caller never passed
        const body = args.reply === 'leak' ? `key ${KEY} and sid=0123456789abcdef` : (args.reply ?? 'ok')
        return { body, lines: [body] }
      },
    }),
  )
  ctx.tools.register(
    defineTool({
      name: 'drop_table',
      description: 'destructive',
      parameters: t.object({}),
      output: { schema: t.string() },
      annotations: { destructive: true },
      execute: () => 'dropped',
    }),
  )
  return { ctx, runs }
}

const call = (ctx: Context, name: string, args: unknown, agent?: ReturnType<typeof createAgent>) => kit.call(ctx, name, args, { agent })

function error(result: ToolResult) {
  return result.isError ? result.error : undefined
}

describe('secrets-guard', () => {
  let ctx: Context
  afterEach(kit.disposeAll)

  it('denies a call whose arguments carry a secret, before anyone is asked to approve it', async () => {
    const deployed = await deployment()
    ctx = deployed.ctx
    ctx.plugin(SecretsGuard, {})
    let asked = 0
    ctx.plugin({ name: 'asker', apply: (ctx: Context) => ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'every call' })) })
    ctx.set('approval', {
      request: async () => {
        asked++
        return 'allowed'
      },
    })
    await assertStarted(ctx)
    const result = await call(ctx, 'fetch', { url: 'https://x', headers: { authorization: `Bearer ${KEY}` } })
    expect(error(result)).to.deep.include({ code: 'DENIED', deniedBy: { stage: 'pre-execute', plugin: 'secrets-guard' } })
    expect(result.content).to.contain('looks like an API key')
    expect(result.content).to.contain('refer to them by the name of the environment variable')
    expect(deployed.runs).to.deep.equal([])
    expect(asked).to.equal(0)
    expect((await call(ctx, 'fetch', { url: 'https://x' })).isError).to.equal(false)
    expect(asked).to.equal(1)
  })

  it('redacts secrets in a success (value and rendering) and in an error', async () => {
    const deployed = await deployment()
    ctx = deployed.ctx
    ctx.plugin(SecretsGuard, { patterns: { 'a session cookie': 'sid=[0-9a-f]{16}' } })
    await assertStarted(ctx)
    const success = await call(ctx, 'fetch', { url: 'https://x', reply: 'leak' })
    expect(success).to.deep.include({ isError: false, content: 'key [redacted] and [redacted]' })
    expect((success as { value: unknown }).value).to.deep.equal({ body: 'key [redacted] and [redacted]', lines: ['key [redacted] and [redacted]'] })
    const failure = await call(ctx, 'fetch', { url: 'https://x', reply: 'fail' })
    expect(error(failure)?.code).to.equal('TOOL_FAILED')
    expect(failure.content).to.equal('Error: "fetch" failed: upstream refused key [redacted]')
    expect((await call(ctx, 'fetch', { url: 'https://x', reply: 'plain' })).content).to.equal('plain')
  })

  it('keeps destructive tools from cautious agents with a synchronous guard', async () => {
    const deployed = await deployment()
    ctx = deployed.ctx
    ctx.plugin(SecretsGuard, { cautious: ['reviewer'] })
    await assertStarted(ctx)
    const reviewer = createAgent(ctx, { name: 'reviewer' })
    const builder = createAgent(ctx, { name: 'builder' })
    const denied = await call(ctx, 'drop_table', {}, reviewer)
    expect(error(denied)?.deniedBy).to.deep.equal({ stage: 'guard', plugin: 'secrets-guard' })
    expect(denied.content).to.contain('ask the user to make it')
    expect((await call(ctx, 'drop_table', {}, builder)).isError).to.equal(false)
  })

  it('loaded on one agent, it polices only that agent', async () => {
    const deployed = await deployment()
    ctx = deployed.ctx
    const guarded = createAgent(ctx, { name: 'guarded' })
    const free = createAgent(ctx, { name: 'free' })
    guarded.ctx.plugin(SecretsGuard, {})
    await assertStarted(ctx)
    const args = { url: 'https://x', headers: { key: KEY } }
    expect(error(await call(ctx, 'fetch', args, guarded))?.code).to.equal('DENIED')
    expect((await call(ctx, 'fetch', args, free)).isError).to.equal(false)
  })

  // no sandbox package here: a CodeRuntime that runs no code but makes scripted calls through the real run_code
  // bridge, so the nested calls go through the core's real pipeline
  it('applies to nested run_code calls as to direct ones; a collapsed direct call never reaches it', async () => {
    const deployed = await deployment('code')
    ctx = deployed.ctx
    // loaded first, so it sees every call that reaches tools/pre-execute, the denied one included
    const seen: string[] = []
    ctx.plugin({ name: 'watcher', apply: (ctx: Context) => ctx.on('tools/pre-execute', (exec) => void seen.push(exec.name)) })
    ctx.plugin(SecretsGuard, {})
    await assertStarted(ctx)
    const replies: BridgeReply[] = []
    const runtime: CodeRuntime = {
      backend: 'scripted',
      async run(request: CodeRunRequest) {
        replies.push(await request.call('fetch', JSON.stringify({ url: 'https://x', headers: { key: KEY } })))
        replies.push(await request.call('fetch', JSON.stringify({ url: 'https://x', reply: 'leak' })))
        return { ok: true, logs: [] }
      },
    }
    ctx.set('codeRuntime', runtime)

    const direct = await call(ctx, 'fetch', { url: 'https://x', reply: 'leak' })
    expect(error(direct)?.code).to.equal('UNKNOWN_TOOL')
    expect(seen).to.deep.equal([])

    const result = await call(ctx, 'run_code', { code: 'return 1', description: 'two fetches' })
    expect(result.isError, result.content).to.equal(false)
    expect(replies[0]).to.deep.include({ ok: false, code: 'DENIED' })
    expect(replies[1]).to.deep.equal({
      ok: true,
      value: JSON.stringify({ body: 'key [redacted] and sid=0123456789abcdef', lines: ['key [redacted] and sid=0123456789abcdef'] }),
    })
    expect(seen).to.deep.equal(['run_code', 'fetch', 'fetch'])
  })
})
