import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { mock } from 'node:test'
import { createAgent, type DispatchNext, defineTool, type Execution, type Mode, type PluginStartError, type ToolResult, t } from '@faber/core'
import * as kit from '@faber/core/testing'
import * as Guards from '@faber/plugin-guards'
import Sandbox from '@faber/sandbox'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'

Logger.levels.base = 0

const started: Context[] = []

/** `setup` loads more plugins, after the sandbox and before the guards */
function deployment(config: Guards.ConfigInput | undefined, options: { mode?: Mode; sandbox?: boolean } = {}, setup?: (ctx: Context) => void) {
  return kit.deployment({ mode: options.mode ?? 'native' }, (ctx) => {
    started.push(ctx)
    if (options.sandbox) ctx.plugin(Sandbox, { poolSize: 1 })
    setup?.(ctx)
    if (config) ctx.plugin(Guards, config)
  })
}

afterEach(async () => {
  for (const ctx of started.splice(0)) await ctx.stop()
})

const call = (ctx: Context, name: string, args: unknown = {}, extra: kit.CallOptions = {}) => kit.call(ctx, name, args, extra)

function code(result: ToolResult) {
  return result.isError ? result.error.code : 'OK'
}

/** a tool that records its arguments and answers with `ok` */
function recorder(name: string, runs: unknown[] = [], annotations = {}) {
  return defineTool({
    name,
    description: `records its calls (${name})`,
    parameters: t.record(t.unknown()),
    output: { schema: t.string() },
    annotations,
    execute: (args) => {
      runs.push(args)
      return 'ok'
    },
  })
}

describe('guards: deny rules', () => {
  it('denies by tool-name pattern, naming the rule and its reason', async () => {
    const ctx = await deployment({
      deny: [{ name: 'no-fs', tools: ['fs_*', '*delete*'], reason: 'Use the workspace tools instead.', flags: '' }],
    })
    const runs: unknown[] = []
    for (const name of ['fs_read', 'git_delete_branch', 'read']) ctx.tools.register(recorder(name, runs))
    for (const name of ['fs_read', 'git_delete_branch']) {
      const result = await call(ctx, name)
      expect(result.isError && result.error).to.deep.include({ code: 'DENIED', deniedBy: { stage: 'pre-execute', plugin: 'guards' } })
      expect(result.content).to.equal(`Error: guard rule "no-fs" denied "${name}" (the tool name is denied). Use the workspace tools instead.`)
    }
    expect(code(await call(ctx, 'read'))).to.equal('OK')
    expect(runs).to.have.length(1)
  })

  it('denies by an argument predicate, and only when the selected value matches', async () => {
    const ctx = await deployment({
      deny: [{ name: 'no-rm-rf', tools: ['bash'], argument: '$.command', pattern: 'rm\\s+-(rf|fr)\\b', flags: 'i', reason: 'Delete single files by name.' }],
    })
    const runs: unknown[] = []
    ctx.tools.register(recorder('bash', runs))
    ctx.tools.register(recorder('other', runs))
    const denied = await call(ctx, 'bash', { command: 'cd /tmp && RM -RF build' })
    expect(denied.content).to.equal(
      'Error: guard rule "no-rm-rf" denied "bash": $.command "cd /tmp && RM -RF build" matches /rm\\s+-(rf|fr)\\b/i. Delete single files by name.',
    )
    expect(code(await call(ctx, 'bash', { command: 'rm build/a.o' }))).to.equal('OK')
    expect(code(await call(ctx, 'bash', { cwd: 'rm -rf' }))).to.equal('OK')
    expect(code(await call(ctx, 'other', { command: 'rm -rf /' }))).to.equal('OK')
    expect(runs).to.have.length(3)
  })

  it('selects through arrays and wildcards, and tests non-strings as canonical JSON', async () => {
    const ctx = await deployment({
      deny: [
        { name: 'hosts', tools: ['fetch'], argument: '$.urls[*]', pattern: '^https?://internal\\.', flags: '', reason: 'Only public hosts.' },
        { name: 'sudo', tools: ['run'], argument: '$.options', pattern: '"sudo":true', flags: '', reason: 'No sudo.' },
      ],
    })
    ctx.tools.register(recorder('fetch'))
    ctx.tools.register(recorder('run'))
    expect(code(await call(ctx, 'fetch', { urls: ['https://example.com', 'http://internal.corp/x'] }))).to.equal('DENIED')
    expect(code(await call(ctx, 'fetch', { urls: ['https://example.com/internal.'] }))).to.equal('OK')
    expect(code(await call(ctx, 'run', { options: { user: 'me', sudo: true } }))).to.equal('DENIED')
    expect(code(await call(ctx, 'run', { options: { sudo: false } }))).to.equal('OK')
  })

  it('refuses a rule with an argument but no pattern, or a bad path, at load', async () => {
    for (const rule of [
      { tools: ['x'], argument: '$.a', reason: 'r' },
      { tools: ['x'], argument: 'command', pattern: 'y', reason: 'r' },
      { tools: ['x'], argument: '$.a', pattern: 'y', flags: 'g', reason: 'r' },
    ]) {
      const error = await deployment({ deny: [rule] }).catch((e) => e)
      expect((error as PluginStartError | undefined)?.cause, JSON.stringify(rule)).to.be.instanceOf(TypeError)
    }
  })
})

describe('guards: path rules', () => {
  let dir: string
  let root: string

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-guards-'))
    root = join(dir, 'root')
    await mkdir(join(root, 'src'), { recursive: true })
    await mkdir(join(dir, 'outside'))
    await writeFile(join(root, 'src', 'a.txt'), 'a')
    await writeFile(join(dir, 'outside', 'secret'), 's')
    await symlink(join(dir, 'outside'), join(root, 'escape'))
    await symlink(join(root, 'src'), join(dir, 'outside', 'back'))
  })

  afterEach(() => rm(dir, { recursive: true, force: true }))

  async function paths() {
    const ctx = await deployment({
      paths: [{ name: 'workspace', tools: ['read', 'copy'], arguments: ['$.path', '$.to'], roots: [root], reason: 'Stay in the workspace.' }],
    } as never)
    ctx.tools.register(recorder('read'))
    ctx.tools.register(recorder('copy'))
    return ctx
  }

  it('allows paths inside the root, existing or not, relative or absolute', async () => {
    const ctx = await paths()
    for (const path of ['src/a.txt', join(root, 'src', 'a.txt'), 'src/new/deeper/file', 'src/../src/a.txt', 'nope/../src/x', '.']) {
      expect(code(await call(ctx, 'read', { path })), path).to.equal('OK')
    }
  })

  it('denies .. and symlink escapes, saying where the path really leads', async () => {
    const ctx = await paths()
    const real = Guards.resolveReal(join(dir, 'outside'))
    const cases: [string, string][] = [
      ['../outside/secret', join(real, 'secret')],
      ['escape/secret', join(real, 'secret')],
      ['escape/not-yet/../secret', join(real, 'secret')],
      ['src/missing/../../../outside', real],
      [join(dir, 'outside', 'back', '..', 'secret'), join(real, 'secret')],
    ]
    for (const [path, leads] of cases) {
      const result = await call(ctx, 'read', { path })
      expect(result.isError && result.error.deniedBy?.plugin, path).to.equal('guards')
      expect(result.content, path).to.contain(`guard rule "workspace" denied "read": $.path ${JSON.stringify(path)} resolves to ${JSON.stringify(leads)}`)
      expect(result.content).to.contain('Stay in the workspace.')
    }
  })

  it('checks every configured argument and refuses a non-string path', async () => {
    const ctx = await paths()
    expect(code(await call(ctx, 'copy', { path: 'src/a.txt', to: 'src/b.txt' }))).to.equal('OK')
    expect(code(await call(ctx, 'copy', { path: 'src/a.txt', to: '../outside/b' }))).to.equal('DENIED')
    const result = await call(ctx, 'read', { path: 42 })
    expect(result.content).to.contain('$.path should be a path string')
  })
})

describe('guards: repeat-call breaker', () => {
  it('reminds from N identical calls in a row and blocks from M, saying what to do instead', async () => {
    const ctx = await deployment({ breaker: { remindAfter: 2, blockAfter: 4 } })
    const runs: unknown[] = []
    ctx.tools.register(recorder('read', runs))
    const results = []
    // key order does not matter: arguments are compared as canonical JSON
    for (let i = 0; i < 5; i++) results.push(await call(ctx, 'read', i % 2 ? { a: 1, b: 2 } : { b: 2, a: 1 }))
    expect(results[0].content).to.equal('ok')
    expect(results[1].content).to.match(/^ok\n\n\[reminder\] That was call 2 in a row of "read" with the same arguments/)
    expect(results[2].content).to.contain('call 3 in a row')
    expect(results[2].content).to.contain('From 4 identical calls in a row on, such calls are blocked.')
    for (const blocked of results.slice(3)) {
      expect(blocked.isError && blocked.error.deniedBy).to.deep.equal({ stage: 'pre-execute', plugin: 'guards' })
      expect(blocked.content).to.contain('use the result you already have, change the arguments, or take a different approach')
    }
    expect(runs).to.have.length(3)
  })

  it('a different call ends the streak', async () => {
    const ctx = await deployment({ breaker: { remindAfter: 2, blockAfter: 3 } })
    ctx.tools.register(recorder('read'))
    ctx.tools.register(recorder('list'))
    await call(ctx, 'read', { p: 1 })
    expect(code(await call(ctx, 'read', { p: 2 }))).to.equal('OK')
    await call(ctx, 'read', { p: 2 })
    await call(ctx, 'list', { p: 2 })
    const again = await call(ctx, 'read', { p: 2 })
    expect(again.content).to.equal('ok')
  })

  it('counts per agent, and a user turn resets only that agent', async () => {
    const ctx = await deployment({ breaker: { remindAfter: 0, blockAfter: 2 } })
    ctx.tools.register(recorder('read'))
    const a = createAgent(ctx, { name: 'a' })
    const b = createAgent(ctx, { name: 'b' })
    expect(code(await call(ctx, 'read', {}, { agent: a }))).to.equal('OK')
    expect(code(await call(ctx, 'read', {}, { agent: b }))).to.equal('OK')
    expect(code(await call(ctx, 'read', {}, { agent: a }))).to.equal('DENIED')
    ctx.emit('agent/turn', { agent: a, turn: 2 })
    expect(code(await call(ctx, 'read', {}, { agent: a }))).to.equal('OK')
    expect(code(await call(ctx, 'read', {}, { agent: b }))).to.equal('DENIED')
  })

  it("counts per session when one agent serves several, a program's calls in its session", async () => {
    const ctx = await deployment({ breaker: { remindAfter: 0, blockAfter: 2 } }, { mode: 'both', sandbox: true })
    ctx.tools.register(recorder('read'))
    const a = createAgent(ctx, { name: 'a' })
    expect(code(await call(ctx, 'read', {}, { agent: a, session: 's1' }))).to.equal('OK')
    expect(code(await call(ctx, 'read', {}, { agent: a, session: 's2' }))).to.equal('OK')
    expect(code(await call(ctx, 'read', {}, { agent: a }))).to.equal('OK')
    const program = { code: 'try { await tools.read({}) } catch (error) { return error.message }', description: 'read' }
    expect((await call(ctx, 'run_code', program, { agent: a, session: 's1' })).content).to.contain('repeat-call breaker')
    expect((await call(ctx, 'run_code', program, { agent: a, session: 's3' })).content).not.to.contain('repeat-call breaker')
    // an ended session's streaks go with it
    ctx.emit('tools/session-end', { agent: a, session: 's2' })
    expect(code(await call(ctx, 'read', {}, { agent: a, session: 's2' }))).to.equal('OK')
  })

  it('a user turn resets calls made without an agent', async () => {
    const ctx = await deployment({ breaker: { remindAfter: 0, blockAfter: 2 } })
    ctx.tools.register(recorder('read'))
    await call(ctx, 'read')
    expect(code(await call(ctx, 'read'))).to.equal('DENIED')
    ctx.emit('agent/turn', { turn: 2 })
    expect(code(await call(ctx, 'read'))).to.equal('OK')
  })

  it('refuses blockAfter <= remindAfter', async () => {
    const error = await deployment({ breaker: { remindAfter: 3, blockAfter: 3 } }).catch((e) => e)
    expect(String(error)).to.contain('breaker.blockAfter (3) must be greater than breaker.remindAfter (3)')
  })
})

describe('guards: rate limits', () => {
  afterEach(() => mock.timers.reset())

  it('limits calls per turn per agent; a turn starts the count again', async () => {
    const ctx = await deployment({ breaker: { remindAfter: 0, blockAfter: 0 }, rateLimits: [{ name: 'web', tools: ['web_*'], perTurn: 2, perMinute: 0 }] })
    ctx.tools.register(recorder('web_fetch'))
    ctx.tools.register(recorder('web_search'))
    ctx.tools.register(recorder('read'))
    const a = createAgent(ctx, { name: 'a' })
    const b = createAgent(ctx, { name: 'b' })
    expect(code(await call(ctx, 'web_fetch', {}, { agent: a }))).to.equal('OK')
    expect(code(await call(ctx, 'web_search', {}, { agent: a }))).to.equal('OK')
    const limited = await call(ctx, 'web_fetch', {}, { agent: a })
    expect(limited.isError && limited.error.deniedBy).to.deep.equal({ stage: 'pre-execute', plugin: 'guards' })
    expect(limited.content).to.contain('rate limit "web": "web_fetch" may run at most 2 times per turn')
    expect(code(await call(ctx, 'read', {}, { agent: a }))).to.equal('OK')
    expect(code(await call(ctx, 'web_fetch', {}, { agent: b }))).to.equal('OK')
    ctx.emit('agent/turn', { agent: a, turn: 2 })
    expect(code(await call(ctx, 'web_fetch', {}, { agent: a }))).to.equal('OK')
  })

  it('limits calls per sliding minute (fake clock)', async () => {
    mock.timers.enable({ apis: ['Date'], now: 1_000_000 })
    const ctx = await deployment({ breaker: { remindAfter: 0, blockAfter: 0 }, rateLimits: [{ tools: ['read'], perTurn: 0, perMinute: 2 }] })
    ctx.tools.register(recorder('read'))
    expect(code(await call(ctx, 'read'))).to.equal('OK')
    mock.timers.tick(30_000)
    expect(code(await call(ctx, 'read'))).to.equal('OK')
    mock.timers.tick(20_000)
    const limited = await call(ctx, 'read')
    expect(limited.content).to.contain('rate limit "rateLimits[0]": "read" may run at most 2 times per minute; the next call is possible in 10 s')
    // a user turn does not reset a window that is about time
    ctx.emit('agent/turn', { turn: 2 })
    expect(code(await call(ctx, 'read'))).to.equal('DENIED')
    mock.timers.tick(10_000)
    expect(code(await call(ctx, 'read'))).to.equal('OK')
    expect(code(await call(ctx, 'read'))).to.equal('DENIED')
  })

  it("counts a turn per session and a minute per agent, across the agent's sessions", async () => {
    const ctx = await deployment({
      breaker: { remindAfter: 0, blockAfter: 0 },
      rateLimits: [
        { name: 'turn', tools: ['read'], perTurn: 1 },
        { name: 'minute', tools: ['list'], perMinute: 2 },
      ],
    })
    ctx.tools.register(recorder('read'))
    ctx.tools.register(recorder('list'))
    expect(code(await call(ctx, 'read', {}, { session: 's1' }))).to.equal('OK')
    expect((await call(ctx, 'read', {}, { session: 's1' })).content).to.contain('rate limit "turn"')
    expect(code(await call(ctx, 'read', {}, { session: 's2' }))).to.equal('OK')
    expect(code(await call(ctx, 'list', {}, { session: 's1' }))).to.equal('OK')
    expect(code(await call(ctx, 'list', {}, { session: 's2' }))).to.equal('OK')
    expect((await call(ctx, 'list', {}, { session: 's3' })).content).to.contain('rate limit "minute"')
  })

  it('a call denied later in the pipeline (approval) does not use up the limit', async () => {
    const ctx = await deployment({ rateLimits: [{ tools: ['write'], perTurn: 1, perMinute: 0 }] })
    ctx.tools.register(recorder('write'))
    let answer = 'rejected'
    ctx.plugin({ name: 'asker', apply: (ctx: Context) => ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'writes need a yes' })) })
    ctx.set('approval', { request: async () => answer })
    expect(code(await call(ctx, 'write'))).to.equal('DENIED')
    answer = 'allowed'
    expect(code(await call(ctx, 'write'))).to.equal('OK')
    const limited = await call(ctx, 'write')
    expect(limited.content).to.contain('at most 1 time per turn')
  })

  it('concurrent calls cannot both take the last slot', async () => {
    const ctx = await deployment({ rateLimits: [{ tools: ['read'], perTurn: 1, perMinute: 0 }] })
    ctx.tools.register(recorder('read'))
    const results = await Promise.all([call(ctx, 'read', { n: 1 }), call(ctx, 'read', { n: 2 })])
    expect(results.map(code).sort()).to.deep.equal(['DENIED', 'OK'])
    const denied = results.find((r) => r.isError)!
    // both passed the pre-check; the guard stage, which counts, refused the second
    expect(denied.isError && denied.error.deniedBy).to.deep.equal({ stage: 'guard', plugin: 'guards' })
  })
})

describe('guards: timeout wrapper', () => {
  afterEach(() => mock.timers.reset())

  function slow(name: string, options: { honours: boolean; timeoutMs?: number }) {
    const state = {
      started: kit.deferred<void>(),
      aborted: false,
      finish: kit.deferred<string>(),
      signal: undefined as AbortSignal | undefined,
      exec: undefined as Execution | undefined,
    }
    const tool = defineTool({
      name,
      description: 'waits to be told to finish',
      parameters: t.object({}),
      output: { schema: t.string() },
      timeoutMs: options.timeoutMs,
      execute: (_, run) => {
        state.signal = run.signal
        state.exec = run.exec
        state.started.resolve()
        run.signal.addEventListener('abort', () => {
          state.aborted = true
          if (options.honours) state.finish.reject(run.signal.reason)
        })
        return state.finish.promise
      },
    })
    return { tool, state }
  }

  it('a body that honours its signal: TOOL_TIMEOUT, and the body saw the abort', async () => {
    mock.timers.enable({ apis: ['setTimeout'] })
    const ctx = await deployment({ timeout: { defaultMs: 1000, exempt: [] } })
    const { tool, state } = slow('slow', { honours: true })
    ctx.tools.register(tool)
    const pending = call(ctx, 'slow')
    await state.started.promise
    mock.timers.tick(999)
    expect(state.aborted).to.equal(false)
    mock.timers.tick(1)
    const result = await pending
    expect(result.isError && result.error.code).to.equal('TOOL_TIMEOUT')
    expect(result.content).to.contain('"slow" did not finish within 1000 ms')
    expect(state.aborted).to.equal(true)
  })

  it('a body that ignores its signal: TOOL_TIMEOUT at the deadline while the body still runs', async () => {
    mock.timers.enable({ apis: ['setTimeout'] })
    const ctx = await deployment({ timeout: { defaultMs: 0, exempt: [] } })
    const { tool, state } = slow('stubborn', { honours: false, timeoutMs: 50 })
    ctx.tools.register(tool)
    const pending = call(ctx, 'stubborn')
    await state.started.promise
    mock.timers.tick(50)
    const result = await pending
    expect(code(result)).to.equal('TOOL_TIMEOUT')
    expect(state.aborted).to.equal(true)
    // the body is still running; its late answer goes nowhere
    state.finish.resolve('late')
  })

  it("a tool's timeoutMs wins over the default; the default skips exempt tools", async () => {
    mock.timers.enable({ apis: ['setTimeout'] })
    const ctx = await deployment({ timeout: { defaultMs: 100, exempt: ['free'] } })
    const own = slow('own', { honours: true, timeoutMs: 500 })
    const free = slow('free', { honours: true })
    ctx.tools.register(own.tool)
    ctx.tools.register(free.tool)
    const ownCall = call(ctx, 'own')
    const freeCall = call(ctx, 'free')
    await Promise.all([own.state.started.promise, free.state.started.promise])
    mock.timers.tick(100)
    expect(own.state.aborted || free.state.aborted).to.equal(false)
    mock.timers.tick(400)
    expect(code(await ownCall)).to.equal('TOOL_TIMEOUT')
    mock.timers.tick(60_000)
    free.state.finish.resolve('done')
    expect(await freeCall).to.include({ isError: false, content: 'done' })
  })

  it('a call that finishes in time is untouched and leaves no timer behind', async () => {
    mock.timers.enable({ apis: ['setTimeout'] })
    const ctx = await deployment({ timeout: { defaultMs: 100, exempt: [] } })
    const { tool, state } = slow('quick', { honours: true })
    ctx.tools.register(tool)
    const pending = call(ctx, 'quick')
    await state.started.promise
    state.finish.resolve('fine')
    expect(await pending).to.include({ isError: false, content: 'fine' })
    mock.timers.tick(1000)
    expect(state.aborted).to.equal(false)
  })

  it('composes with other wrappers: outer ones see TOOL_TIMEOUT, the body gets its signal, cancellation flows through', async () => {
    mock.timers.enable({ apis: ['setTimeout'] })
    const seen: string[] = []
    const ctx = await deployment(undefined, {}, (ctx) => {
      ctx.plugin({
        name: 'outer',
        apply: (ctx: Context) =>
          ctx.on('tools/execute', async (_: Execution, next: DispatchNext) => {
            const result = await next()
            seen.push(`outer saw ${code(result)}`)
            return result
          }),
      })
      ctx.plugin(Guards, { timeout: { defaultMs: 100, exempt: [] } })
      ctx.plugin({
        name: 'inner',
        apply: (ctx: Context) =>
          ctx.on('tools/execute', async (_: Execution, next: DispatchNext) => {
            seen.push('inner ran')
            return next()
          }),
      })
    })
    const { tool, state } = slow('slow', { honours: true })
    ctx.tools.register(tool)
    const pending = call(ctx, 'slow')
    await state.started.promise
    mock.timers.tick(100)
    expect(code(await pending)).to.equal('TOOL_TIMEOUT')
    expect(seen).to.deep.equal(['inner ran', 'outer saw TOOL_TIMEOUT'])
    expect(state.signal).to.not.equal(state.exec?.signal)
    expect(state.exec?.signal.aborted).to.equal(false)

    // the caller's abort reaches the body through the wrapper's own signal
    const second = slow('slow2', { honours: true })
    ctx.tools.register(second.tool)
    const controller = new AbortController()
    const cancelled = call(ctx, 'slow2', {}, { signal: controller.signal })
    await second.state.started.promise
    controller.abort()
    expect(code(await cancelled)).to.equal('TOOL_FAILED')
    expect(second.state.aborted).to.equal(true)
  })
})

describe('guards: timeoutWrapper on its own', () => {
  it("follows the signal it is handed, not only the call's own", async () => {
    const upstream = new AbortController()
    const own = new AbortController()
    let child: AbortSignal | undefined
    const exec = { name: 'x', signal: own.signal, tool: {} } as unknown as Execution
    const pending = Guards.timeoutWrapper(() => 60_000)(
      exec,
      (signal) => {
        child = signal
        return new Promise((resolve) => signal!.addEventListener('abort', () => resolve({ isError: false, value: 'stopped', content: 'stopped' })))
      },
      upstream.signal,
    )
    upstream.abort(new Error('outer wrapper gave up'))
    expect(await pending).to.include({ content: 'stopped' })
    expect(child?.reason).to.be.instanceOf(Error)
    expect(own.signal.aborted).to.equal(false)
  })
})

describe('guards under code mode', function () {
  this.timeout(20000)

  it('applies rules, the breaker and rate limits to nested calls exactly as to direct ones', async () => {
    const ctx = await deployment(
      {
        deny: [{ name: 'no-secrets', tools: ['read'], argument: '$.path', pattern: 'secret', flags: '', reason: 'Read something else.' }],
        breaker: { remindAfter: 2, blockAfter: 3 },
        rateLimits: [{ tools: ['list'], perTurn: 1, perMinute: 0 }],
      },
      { mode: 'code', sandbox: true },
    )
    const runs: unknown[] = []
    ctx.tools.register(recorder('read', runs))
    ctx.tools.register(recorder('list', runs))
    const program = `
      const out = []
      const attempt = async (f) => { try { out.push(await f()) } catch (e) { out.push('refused: ' + e.message) } }
      await attempt(() => tools.read({ path: 'secret.txt' }))
      for (let i = 0; i < 3; i++) await attempt(() => tools.read({ path: 'a.txt' }))
      await attempt(() => tools.list({}))
      await attempt(() => tools.list({}))
      return out`
    const result = await call(ctx, 'run_code', { code: program, description: 'exercise the guards' })
    expect(result.isError, result.content).to.equal(false)
    const out = ((result as { value: unknown }).value as { result: string[] }).result
    expect(out[0]).to.match(/^refused: guard rule "no-secrets" denied "read"/)
    expect(out[1]).to.equal('ok')
    // a program gets a nested call's value; the reminder goes on the run_code result the model reads
    expect(out[2]).to.equal('ok')
    expect(result.content).to.contain('[reminder] That was call 2 in a row of "read" with the same arguments')
    expect(result.content).to.contain('(inside the program)')
    expect(out[3]).to.match(/^refused: repeat-call breaker: "read" was called 3 times in a row/)
    expect(out[4]).to.equal('ok')
    expect(out[5]).to.match(/^refused: rate limit "rateLimits\[0\]": "list" may run at most 1 time per turn/)
    expect(runs).to.have.length(3)
  })

  it('a collapsed direct call never reaches the breaker or the rate counters', async () => {
    const ctx = await deployment(
      { breaker: { remindAfter: 0, blockAfter: 2 }, rateLimits: [{ tools: ['read'], perTurn: 1, perMinute: 0 }] },
      { mode: 'code', sandbox: true },
    )
    ctx.tools.register(recorder('read'))
    for (let i = 0; i < 5; i++) {
      const direct = await call(ctx, 'read', { path: 'a' })
      expect(direct.isError && direct.error.code).to.equal('UNKNOWN_TOOL')
      expect(direct.trace).to.deep.equal([{ stage: 'create', decision: 'collapsed', by: 'core' }])
    }
    const result = await call(ctx, 'run_code', { code: `return await tools.read({ path: 'a' })`, description: 'one read' })
    expect(result.isError, result.content).to.equal(false)
    expect(((result as { value: unknown }).value as { result: string }).result).to.equal('ok')
  })
})
