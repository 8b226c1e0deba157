import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import ToolRuntime, { type Agent, assertStarted, createAgent, defineTool, type Mode, type ToolResult, t } from '@faber/core'
import Approval, { type ApprovalAnswer, type ApprovalDecided, type ApprovalQuery, GrantFileError, TerminalAnswerer } from '@faber/plugin-approval'
import Sandbox from '@faber/sandbox'
import { expect } from 'chai'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0

const started: Context[] = []

afterEach(async () => {
  for (const ctx of started.splice(0)) await ctx.stop()
})

async function deployment(config: Approval.Input | undefined, options: { mode?: Mode; sandbox?: boolean } = {}) {
  const ctx = new Context()
  started.push(ctx)
  ctx.plugin(ToolRuntime, { mode: options.mode ?? 'native' })
  if (options.sandbox) ctx.plugin(Sandbox, { poolSize: 1 })
  if (config) ctx.plugin(Approval, config)
  await ctx.start()
  await assertStarted(ctx)
  return ctx
}

function tool(name: string, runs: string[] = [], extra: { readOnly?: boolean; safe?: boolean } = {}) {
  return defineTool({
    name,
    description: `${name}s`,
    parameters: t.record(t.unknown()),
    output: { schema: t.string() },
    annotations: { readOnly: extra.readOnly },
    isConcurrencySafe: () => extra.safe === true,
    execute: () => {
      runs.push(name)
      return `${name} done`
    },
  })
}

let sequence = 0

function call(ctx: Context, name: string, args: unknown = {}, extra: { agent?: Agent; signal?: AbortSignal } = {}) {
  return ctx.tools.execute({ callId: `c${++sequence}`, name, arguments: args, signal: extra.signal ?? new AbortController().signal, agent: extra.agent })
}

/** registers an answerer as its own plugin, so audit events can name it */
function answerer(ctx: Context, name: string, answer: (query: ApprovalQuery) => unknown, on: Context = ctx) {
  on.plugin({ name, apply: (ctx: Context) => ctx.on('approval/request', answer as never) })
}

function audit(ctx: Context) {
  const events: { asked: ApprovalQuery[]; decided: ApprovalDecided[] } = { asked: [], decided: [] }
  ctx.on('approval/asked', (event) => void events.asked.push(event as ApprovalQuery))
  ctx.on('approval/decided', (event) => void events.decided.push(event))
  return events
}

/** ctx.approval is typed as core's ApprovalService; these tests use the rest of the plugin's API */
function service(ctx: Context) {
  return ctx.approval as Approval
}

function denial(result: ToolResult) {
  return result.isError ? result.error : undefined
}

describe('approval: outcomes', () => {
  it('an allow runs the call; a reject denies it; both are audited with the answerer', async () => {
    const ctx = await deployment({})
    const runs: string[] = []
    ctx.tools.register(tool('write', runs))
    const events = audit(ctx)
    let answer: ApprovalAnswer = { decision: 'allow' }
    answerer(ctx, 'operator', () => answer)
    const allowed = await call(ctx, 'write', { path: 'a' })
    expect(allowed).to.include({ isError: false, content: 'write done' })
    answer = { decision: 'reject' }
    const rejected = await call(ctx, 'write', { path: 'b' })
    expect(denial(rejected)).to.deep.include({ code: 'DENIED', deniedBy: { stage: 'approval', plugin: 'approval' } })
    expect(rejected.content).to.contain('rejected by the approver')
    expect(rejected.content).to.not.contain('operator')
    expect(runs).to.deep.equal(['write'])
    expect(events.asked.map((e) => [e.tool, e.arguments, e.reason, e.nested])).to.deep.equal([
      ['write', { path: 'a' }, 'this deployment requires approval for "write"', false],
      ['write', { path: 'b' }, 'this deployment requires approval for "write"', false],
    ])
    expect(events.decided.map((e) => [e.id, e.outcome, e.answeredBy])).to.deep.equal([
      [events.asked[0].id, 'allowed', 'operator'],
      [events.asked[1].id, 'rejected', 'operator'],
    ])
  })

  it('answerers that delegate pass the request on, in order', async () => {
    const ctx = await deployment({})
    ctx.tools.register(tool('write'))
    const events = audit(ctx)
    const seen: string[] = []
    answerer(ctx, 'first', () => void seen.push('first'))
    answerer(ctx, 'second', () => {
      seen.push('second')
      return { decision: 'allow' }
    })
    answerer(ctx, 'third', () => void seen.push('third'))
    expect((await call(ctx, 'write')).isError).to.equal(false)
    expect(seen).to.deep.equal(['first', 'second'])
    expect(events.decided[0].answeredBy).to.equal('second')
  })

  it('answerers on an agent answer only for that agent', async () => {
    const ctx = await deployment({})
    ctx.tools.register(tool('write'))
    const a = createAgent(ctx, { name: 'a' })
    const b = createAgent(ctx, { name: 'b' })
    answerer(ctx, 'for-a', () => ({ decision: 'allow' }), a.ctx)
    await assertStarted(ctx)
    expect((await call(ctx, 'write', {}, { agent: a })).isError).to.equal(false)
    expect(denial(await call(ctx, 'write', {}, { agent: b }))?.code).to.equal('DENIED')
  })
})

describe('approval: failing closed', () => {
  for (const [what, install] of [
    ['no answerer', () => {}],
    [
      'a throwing answerer',
      (ctx: Context) =>
        answerer(ctx, 'broken', () => {
          throw new Error('boom')
        }),
    ],
    ['a rejecting promise', (ctx: Context) => answerer(ctx, 'broken', () => Promise.reject(new Error('boom')))],
    ['a malformed answer', (ctx: Context) => answerer(ctx, 'broken', () => ({ decision: 'yes' }))],
    ['a bad remember scope', (ctx: Context) => answerer(ctx, 'broken', () => ({ decision: 'allow', remember: 'forever' }))],
    ['a string answer', (ctx: Context) => answerer(ctx, 'broken', () => 'allow')],
  ] as [string, (ctx: Context) => void][]) {
    it(`${what}: unavailable, and the call is denied`, async () => {
      const ctx = await deployment({})
      const runs: string[] = []
      ctx.tools.register(tool('write', runs))
      const events = audit(ctx)
      install(ctx)
      let later = 0
      answerer(ctx, 'later', () => {
        later++
        return what === 'no answerer' ? undefined : { decision: 'allow' }
      })
      const result = await call(ctx, 'write')
      expect(denial(result)?.code).to.equal('DENIED')
      expect(result.content).to.contain('no approver answered')
      expect(runs).to.deep.equal([])
      expect(events.decided[0]).to.include({ outcome: 'unavailable', answeredBy: what === 'no answerer' ? 'none' : 'broken' })
      if (what !== 'no answerer') expect(later, 'answerers after a failing one are not asked').to.equal(0)
    })
  }

  it('an abort while waiting: cancelled, and the late answer is discarded (nothing remembered)', async () => {
    const ctx = await deployment({})
    const runs: string[] = []
    ctx.tools.register(tool('write', runs))
    const events = audit(ctx)
    let answer!: (value: ApprovalAnswer) => void
    const asked = new Promise<void>((resolve) =>
      answerer(ctx, 'slow', () => {
        resolve()
        return new Promise<ApprovalAnswer>((r) => {
          answer = r
        })
      }),
    )
    const controller = new AbortController()
    const pending = call(ctx, 'write', {}, { signal: controller.signal })
    await asked
    controller.abort()
    const result = await pending
    expect(denial(result)?.code).to.equal('ABORTED_BEFORE_DISPATCH')
    answer({ decision: 'allow', remember: 'session' })
    await new Promise((resolve) => setImmediate(resolve))
    expect(service(ctx).grants()).to.deep.equal([])
    expect(events.decided.map((e) => [e.outcome, e.answeredBy])).to.deep.equal([['cancelled', 'caller']])
    expect(runs).to.deep.equal([])
  })
})

describe('approval: policies and what needs approval', () => {
  it('never rejects without asking anyone', async () => {
    const ctx = await deployment({ policy: 'never' })
    ctx.tools.register(tool('write'))
    const events = audit(ctx)
    let asked = 0
    answerer(ctx, 'operator', () => {
      asked++
      return { decision: 'allow' }
    })
    expect(denial(await call(ctx, 'write'))?.code).to.equal('DENIED')
    expect(asked).to.equal(0)
    expect(events.decided[0]).to.include({ outcome: 'rejected', answeredBy: 'policy' })
  })

  it('auto allows read-only tools without asking and asks for the rest', async () => {
    const ctx = await deployment({ policy: 'auto' })
    ctx.tools.register(tool('read', [], { readOnly: true }))
    ctx.tools.register(tool('write'))
    const asked: string[] = []
    answerer(ctx, 'operator', (query) => {
      asked.push(query.tool)
      return { decision: 'reject' }
    })
    expect((await call(ctx, 'read')).isError).to.equal(false)
    expect(denial(await call(ctx, 'write'))?.code).to.equal('DENIED')
    expect(asked).to.deep.equal(['write'])
  })

  it('require and except choose the tools that ask; asks from other plugins are answered too', async () => {
    const ctx = await deployment({ require: ['write', 'edit*'], except: ['edit_notes'] })
    for (const name of ['write', 'edit_file', 'edit_notes', 'read', 'fetch']) ctx.tools.register(tool(name))
    ctx.plugin({
      name: 'net-policy',
      apply: (ctx: Context) => ctx.on('tools/pre-execute', (exec) => (exec.name === 'fetch' ? { kind: 'ask', reason: 'network access' } : undefined)),
    })
    const asked: string[] = []
    answerer(ctx, 'operator', (query) => {
      asked.push(`${query.tool}: ${query.reason}`)
      return { decision: 'allow' }
    })
    for (const name of ['write', 'edit_file', 'edit_notes', 'read', 'fetch']) expect((await call(ctx, name)).isError, name).to.equal(false)
    expect(asked).to.deep.equal([
      'write: this deployment requires approval for "write"',
      'edit_file: this deployment requires approval for "edit_file"',
      'fetch: network access',
    ])
  })

  it('refuses a rule with a bad argument path at load', async () => {
    const ctx = new Context()
    started.push(ctx)
    ctx.plugin(ToolRuntime)
    ctx.plugin(Approval, { rules: [{ tool: 'write', arguments: { path: '^src/' }, decision: 'allow' }] })
    await ctx.start()
    let error: unknown
    await assertStarted(ctx).catch((e) => (error = e))
    expect(String(error)).to.contain('rule "rules[0]"')
  })
})

describe('approval: the rules answerer and grants', () => {
  let dir: string
  beforeEach(async () => (dir = await mkdtemp(join(tmpdir(), 'faber-approval-'))))
  afterEach(() => rm(dir, { recursive: true, force: true }))

  it('answers from configured rules by tool, argument and agent; reject wins', async () => {
    const ctx = await deployment({
      rules: [
        { name: 'src', tool: 'write', arguments: { '$.path': '^src/' }, decision: 'allow' },
        { name: 'no-env', tool: '*', arguments: { '$.path': '\\.env$' }, decision: 'reject' },
        { name: 'ci', tool: 'deploy', agent: 'ci', decision: 'allow' },
      ],
    })
    ctx.tools.register(tool('write'))
    ctx.tools.register(tool('deploy'))
    const ci = createAgent(ctx, { name: 'ci' })
    const events = audit(ctx)
    expect((await call(ctx, 'write', { path: 'src/a.ts' })).isError).to.equal(false)
    expect(denial(await call(ctx, 'write', { path: 'src/.env' }))?.code).to.equal('DENIED')
    expect(denial(await call(ctx, 'write', { path: 'docs/a.md' }))?.code, 'not covered: nobody else answers').to.equal('DENIED')
    expect((await call(ctx, 'deploy', {}, { agent: ci })).isError).to.equal(false)
    expect(denial(await call(ctx, 'deploy'))?.code).to.equal('DENIED')
    expect(events.decided.map((e) => [e.outcome, e.answeredBy, e.note])).to.deep.equal([
      ['allowed', 'approval-rules', 'decided by rule src'],
      ['rejected', 'approval-rules', 'decided by rule no-env'],
      ['unavailable', 'none', 'no answerer answered'],
      ['allowed', 'approval-rules', 'decided by rule ci'],
      ['unavailable', 'none', 'no answerer answered'],
    ])
  })

  it('a once grant is used up; a session grant from an answer covers the tool for that agent', async () => {
    const ctx = await deployment({})
    ctx.tools.register(tool('write'))
    ctx.tools.register(tool('edit'))
    const a = createAgent(ctx, { name: 'a' })
    const b = createAgent(ctx, { name: 'b' })
    const once = await service(ctx).grant({ tool: 'edit', scope: 'once' })
    const asked: string[] = []
    answerer(ctx, 'operator', (query) => {
      asked.push(`${query.tool}@${query.agent?.name}`)
      return { decision: 'allow', remember: 'session' }
    })
    expect((await call(ctx, 'edit', {}, { agent: a })).isError).to.equal(false)
    expect(
      service(ctx)
        .grants()
        .map((g) => g.id),
    ).to.not.include(once.id)
    expect((await call(ctx, 'write', {}, { agent: a })).isError).to.equal(false)
    expect((await call(ctx, 'write', { other: 1 }, { agent: a })).isError).to.equal(false)
    expect((await call(ctx, 'write', {}, { agent: b })).isError).to.equal(false)
    expect(asked).to.deep.equal(['write@a', 'write@b'])
    const grants = service(ctx).grants()
    expect(grants.map((g) => [g.tool, g.agent, g.scope, g.decision, g.by])).to.deep.equal([
      ['write', 'a', 'session', 'allow', 'operator'],
      ['write', 'b', 'session', 'allow', 'operator'],
    ])
    expect(await service(ctx).revoke(grants[0].id)).to.equal(true)
    expect(await service(ctx).revoke(grants[0].id)).to.equal(false)
    await call(ctx, 'write', {}, { agent: a })
    expect(asked).to.have.length(3)
  })

  it('always grants persist in a JSON file, written atomically, and survive a restart', async () => {
    const file = join(dir, 'state', 'grants.json')
    const first = await deployment({ file })
    first.tools.register(tool('write'))
    answerer(first, 'operator', () => ({ decision: 'allow', remember: 'always' }))
    const events = audit(first)
    expect((await call(first, 'write')).isError).to.equal(false)
    expect(events.decided[0]).to.include({ remember: 'always' })
    const saved = JSON.parse(await readFile(file, 'utf8'))
    expect(saved.version).to.equal(1)
    expect(saved.grants).to.have.length(1)
    expect(saved.grants[0]).to.include({ tool: 'write', decision: 'allow', by: 'operator', id: events.decided[0].grant })
    expect(await readdir(join(dir, 'state'))).to.deep.equal(['grants.json'])
    await first.stop()

    const second = await deployment({ file })
    second.tools.register(tool('write'))
    let asked = 0
    answerer(second, 'operator', () => {
      asked++
      return { decision: 'reject' }
    })
    expect((await call(second, 'write')).isError).to.equal(false)
    expect(asked).to.equal(0)
    const [grant] = service(second).grants()
    expect(grant).to.include({ tool: 'write', scope: 'always' })
    expect(await service(second).revoke(grant.id)).to.equal(true)
    expect(JSON.parse(await readFile(file, 'utf8')).grants).to.deep.equal([])
    expect(denial(await call(second, 'write'))?.code).to.equal('DENIED')
  })

  it("keeps an operator's edits: entries without ids are read, and kept when the service writes", async () => {
    const file = join(dir, 'grants.json')
    await writeFile(file, JSON.stringify({ version: 1, grants: [{ tool: 'read*', decision: 'allow' }] }))
    const ctx = await deployment({ file })
    ctx.tools.register(tool('read_file'))
    expect((await call(ctx, 'read_file')).isError).to.equal(false)
    // edited while running: picked up by the next write, and by reload
    await writeFile(
      file,
      JSON.stringify({
        version: 1,
        grants: [
          { tool: 'read*', decision: 'allow' },
          { id: 'mine', tool: 'rm', decision: 'reject' },
        ],
      }),
    )
    await service(ctx).grant({ tool: 'deploy', scope: 'always' })
    const tools = JSON.parse(await readFile(file, 'utf8')).grants.map((g: { tool: string }) => g.tool)
    expect(tools).to.deep.equal(['read*', 'rm', 'deploy'])
    expect(
      service(ctx)
        .grants()
        .map((g) => g.tool),
    ).to.deep.equal(['read*', 'rm', 'deploy'])
  })

  for (const [what, text] of [
    ['not JSON', '{ "version": 1, "grants": [ '],
    ['the wrong shape', '{ "grants": {} }'],
    ['a bad entry', '{ "version": 1, "grants": [{ "tool": "write", "decision": "maybe" }] }'],
  ]) {
    it(`a corrupt grant file (${what}) is reported, not used, and never overwritten`, async () => {
      const file = join(dir, 'grants.json')
      await writeFile(file, text)
      const ctx = await deployment({ file })
      ctx.tools.register(tool('write'))
      const events = audit(ctx)
      answerer(ctx, 'operator', () => ({ decision: 'allow', remember: 'always' }))
      expect((await call(ctx, 'write')).isError).to.equal(false)
      expect(service(ctx).fileError).to.be.instanceOf(GrantFileError)
      expect(service(ctx).fileError?.message).to.contain(`the grant file ${file} cannot be used`)
      expect(service(ctx).fileError?.message).to.contain('It was left untouched')
      expect(service(ctx).persistent).to.equal(false)
      // the answer stands, remembered for the session only, and the decision says why
      expect(events.decided[0]).to.include({ outcome: 'allowed', remember: 'session' })
      expect(events.decided[0].note).to.contain('kept for this session only')
      let error: unknown
      await service(ctx)
        .grant({ tool: 'x', scope: 'always' })
        .catch((e) => (error = e))
      expect(error).to.be.instanceOf(GrantFileError)
      expect(await readFile(file, 'utf8')).to.equal(text)
      // fixed by the operator: reload puts it back in use
      await writeFile(file, JSON.stringify({ version: 1, grants: [] }))
      await service(ctx).reload()
      expect(service(ctx).persistent).to.equal(true)
    })
  }
})

/** a PassThrough pair posing as a TTY; `answer` types a line once the prompt has been written */
function terminal(tty = true) {
  const input = Object.assign(new PassThrough(), { isTTY: tty })
  const output = Object.assign(new PassThrough(), { isTTY: tty })
  let text = ''
  const waiters: { pattern: string; resolve: () => void }[] = []
  output.on('data', (chunk) => {
    text += chunk.toString()
    for (const waiter of waiters.splice(0)) {
      if (text.includes(waiter.pattern)) waiter.resolve()
      else waiters.push(waiter)
    }
  })
  return {
    input,
    output,
    get text() {
      return text
    },
    /** resolves once the output contains `pattern` for the `nth` time */
    seen(pattern: string, nth = 1) {
      const count = () => text.split(pattern).length - 1
      return new Promise<void>((resolve) => {
        const check = { pattern, resolve: () => (count() >= nth ? resolve() : waiters.push(check)) }
        check.resolve()
      })
    },
    type(line: string) {
      input.write(`${line}\n`)
    },
  }
}

describe('approval: the terminal answerer', () => {
  let dir: string
  beforeEach(async () => (dir = await mkdtemp(join(tmpdir(), 'faber-terminal-'))))
  afterEach(() => rm(dir, { recursive: true, force: true }))

  async function withTerminal(config: Approval.Input = {}, tty = true) {
    const ctx = await deployment(config)
    const term = terminal(tty)
    ctx.plugin(TerminalAnswerer, { input: term.input, output: term.output })
    await assertStarted(ctx)
    ctx.tools.register(tool('write'))
    return { ctx, term }
  }

  it('shows the tool, the agent and the arguments, and answers y / n', async () => {
    const { ctx, term } = await withTerminal()
    const coder = createAgent(ctx, { name: 'coder' })
    const events = audit(ctx)
    const pending = call(ctx, 'write', { path: 'a.txt', text: 'hi' }, { agent: coder })
    await term.seen('[n] reject: ')
    expect(term.text).to.contain('agent "coder" wants to call write')
    expect(term.text).to.contain('reason: this deployment requires approval for "write"')
    expect(term.text).to.contain('  {\n    "path": "a.txt",\n    "text": "hi"\n  }')
    expect(term.text).to.not.contain('[a] always allow')
    term.type('y')
    expect((await pending).isError).to.equal(false)
    expect(events.decided[0]).to.include({ outcome: 'allowed', answeredBy: 'approval-terminal' })
    const second = call(ctx, 'write', { path: 'b.txt' })
    await term.seen('[n] reject: ', 2)
    term.type('n')
    expect(denial(await second)?.code).to.equal('DENIED')
    expect(service(ctx).grants()).to.deep.equal([])
  })

  it('allow for the session records a grant: the next call is not asked', async () => {
    const { ctx, term } = await withTerminal()
    const pending = call(ctx, 'write', { path: 'a' })
    await term.seen('reject: ')
    term.type('s')
    expect((await pending).isError).to.equal(false)
    expect((await call(ctx, 'write', { path: 'b' })).isError).to.equal(false)
    expect(term.text.split('approval needed')).to.have.length(2)
    expect(service(ctx).grants()[0]).to.include({ tool: 'write', scope: 'session', by: 'approval-terminal' })
  })

  it('offers always when there is a grant file, and writes it there', async () => {
    const file = join(dir, 'grants.json')
    const { ctx, term } = await withTerminal({ file })
    const pending = call(ctx, 'write')
    await term.seen('reject: ')
    expect(term.text).to.contain('[y] allow once  [s] allow for this session  [a] always allow  [n] reject: ')
    term.type('maybe')
    await term.seen('please answer y, s, a or n: ')
    term.type('a')
    expect((await pending).isError).to.equal(false)
    expect(JSON.parse(await readFile(file, 'utf8')).grants[0]).to.include({ tool: 'write', by: 'approval-terminal' })
  })

  it('asks one question at a time, and ignores what was typed before a question', async () => {
    const { ctx, term } = await withTerminal()
    term.type('y')
    const first = call(ctx, 'write', { n: 1 })
    const second = call(ctx, 'write', { n: 2 })
    await term.seen('reject: ')
    expect(term.text.split('approval needed')).to.have.length(2)
    term.type('n')
    expect(denial(await first)?.code).to.equal('DENIED')
    await term.seen('reject: ', 2)
    expect(term.text).to.contain('"n": 2')
    term.type('y')
    expect((await second).isError).to.equal(false)
  })

  it('shows the program of a nested call, with control characters made visible', async () => {
    const ctx = await deployment({})
    const term = terminal()
    ctx.plugin(TerminalAnswerer, { input: term.input, output: term.output })
    await assertStarted(ctx)
    const exec = { parent: {}, tool: { annotations: {} } } as never
    const pending = service(ctx).request({
      tool: 'write',
      arguments: { path: '\u001b[2Jx' },
      callId: 'c9/1',
      reason: 'needs a yes \u001b[31m',
      program: "await tools.write({ path: 'x' })\nconsole.log('\u001b[2J')",
      signal: new AbortController().signal,
      exec,
    })
    await term.seen('reject: ')
    expect(term.text).to.contain("inside run_code (call c9/1), program:\n  | await tools.write({ path: 'x' })\n  | console.log('\\x1b[2J')")
    expect(term.text).to.contain('reason: needs a yes \\x1b[31m')
    expect(term.text).to.contain('"path": "\\u001b[2Jx"')
    expect(term.text).to.not.contain('\u001b')
    term.type('n')
    expect(await pending).to.equal('rejected')
  })

  it('stops asking when the call is cancelled, and when the input closes', async () => {
    const { ctx, term } = await withTerminal()
    const controller = new AbortController()
    const pending = call(ctx, 'write', {}, { signal: controller.signal })
    await term.seen('reject: ')
    controller.abort()
    expect(denial(await pending)?.code).to.equal('ABORTED_BEFORE_DISPATCH')
    await term.seen('(the call was cancelled; no answer needed)')
    const next = call(ctx, 'write')
    await term.seen('reject: ', 2)
    term.input.end()
    expect(denial(await next)?.code).to.equal('DENIED')
    expect(term.text).to.contain('(input closed; not answered)')
  })

  it('without a TTY it does not answer: unavailable, nothing written', async () => {
    const { ctx, term } = await withTerminal({}, false)
    const events = audit(ctx)
    expect(denial(await call(ctx, 'write'))?.code).to.equal('DENIED')
    expect(events.decided[0]).to.include({ outcome: 'unavailable', answeredBy: 'none' })
    expect(term.text).to.equal('')
  })
})

describe('approval under code mode', function () {
  this.timeout(20000)

  it('a nested call that asks holds only that call; the program and other nested calls go on', async () => {
    const ctx = await deployment({ require: ['write'] }, { mode: 'code', sandbox: true })
    const runs: string[] = []
    ctx.tools.register(tool('write', runs, { safe: true }))
    ctx.tools.register(tool('read', runs, { safe: true }))
    const events = audit(ctx)
    let readSettled!: () => void
    const readDone = new Promise<void>((resolve) => (readSettled = resolve))
    ctx.on('code/call-settle', (event) => event.name === 'read' && readSettled())
    const queries: ApprovalQuery[] = []
    answerer(ctx, 'operator', async (query) => {
      queries.push(query)
      // holds the write until the read that the program issued after it has finished
      await readDone
      return { decision: 'allow' }
    })
    const program = `const write = tools.write({ path: 'a' })
const read = await tools.read({ path: 'b' })
console.log('after read: ' + read)
console.log('after write: ' + await write)`
    const result = await call(ctx, 'run_code', { code: program, description: 'write while reading' })
    expect(result.isError, result.content).to.equal(false)
    expect(result.content).to.equal('after read: read done\nafter write: write done')
    expect(runs).to.deep.equal(['read', 'write'])
    expect(queries).to.have.length(1)
    expect(queries[0]).to.include({ tool: 'write', nested: true, program })
    expect(queries[0].callId).to.match(/\/1$/)
    expect(events.asked[0]).to.include({ nested: true, program })
  })

  it('a collapsed direct call never asks for approval', async () => {
    const ctx = await deployment({}, { mode: 'code', sandbox: true })
    ctx.tools.register(tool('write'))
    const events = audit(ctx)
    let asked = 0
    answerer(ctx, 'operator', () => {
      asked++
      return { decision: 'allow' }
    })
    const direct = await call(ctx, 'write')
    expect(denial(direct)?.code).to.equal('UNKNOWN_TOOL')
    expect(asked).to.equal(0)
    expect(events.asked).to.deep.equal([])
    const nested = await call(ctx, 'run_code', { code: `return await tools.write({})`, description: 'one write' })
    expect(nested.isError, nested.content).to.equal(false)
    expect(asked).to.equal(1)
  })
})
