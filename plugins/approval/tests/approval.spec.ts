import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { mock } from 'node:test'
import { assertStarted, createAgent, defineTool, type Mode, type ToolResult, t } from '@faber/core'
import * as kit from '@faber/core/testing'
import Approval, {
  type ApprovalAnswer,
  type ApprovalDecided,
  type ApprovalQuery,
  type ApprovalSettled,
  GrantStore,
  TerminalAnswerer,
} from '@faber/plugin-approval'
import Sandbox from '@faber/sandbox'
import DeploymentStore, { SqliteStore } from '@faber/store'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'

Logger.levels.base = 0

const started: Context[] = []

afterEach(async () => {
  for (const ctx of started.splice(0)) await ctx.stop()
})

function deployment(config: Approval.ConfigInput | undefined, options: { mode?: Mode; sandbox?: boolean; store?: string } = {}) {
  return kit.deployment({ mode: options.mode ?? 'native' }, (ctx) => {
    started.push(ctx)
    if (options.store) ctx.plugin(DeploymentStore, { path: options.store })
    if (options.sandbox) ctx.plugin(Sandbox, { poolSize: 1 })
    if (config) ctx.plugin(Approval, config)
  })
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

const call = (ctx: Context, name: string, args: unknown = {}, extra: kit.CallOptions = {}) => kit.call(ctx, name, args, extra)

/** registers an answerer as its own plugin, so audit events can name it */
function answerer(ctx: Context, name: string, answer: (query: ApprovalQuery) => unknown, on: Context = ctx) {
  on.plugin({ name, apply: (ctx: Context) => ctx.on('approval/request', answer as never) })
}

/** an answerer named operator that always gives `decision`, counting the times it was asked */
function counting(ctx: Context, decision: 'allow' | 'reject') {
  const operator = { asked: 0 }
  answerer(ctx, 'operator', () => {
    operator.asked++
    return { decision }
  })
  return operator
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

  it('how an allowed call ended is audited: ok, or its result withheld after the body ran, naming who withheld it', async () => {
    const ctx = await deployment({})
    const runs: string[] = []
    ctx.tools.register(tool('write', runs))
    const events = audit(ctx)
    const settled: ApprovalSettled[] = []
    ctx.on('approval/settled', (event) => void settled.push(event))
    answerer(ctx, 'operator', () => ({ decision: 'allow' }))
    expect((await call(ctx, 'write', { path: 'a' })).isError).to.equal(false)
    ctx.plugin({
      name: 'strict-output',
      apply: (ctx: Context) =>
        ctx.on('tools/post-execute', () => {
          throw new Error('the output check is broken')
        }),
    })
    await assertStarted(ctx)
    const withheld = await call(ctx, 'write', { path: 'b' })
    expect(denial(withheld)?.code).to.equal('RESULT_WITHHELD')
    expect(runs).to.deep.equal(['write', 'write'])
    expect(settled.map((e) => [e.id, e.tool, e.outcome, e.withheldBy?.plugin])).to.deep.equal([
      [events.asked[0].id, 'write', 'ok', undefined],
      [events.asked[1].id, 'write', 'RESULT_WITHHELD', 'strict-output'],
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

describe('approval: deadlines', () => {
  beforeEach(() => mock.timers.enable({ apis: ['setTimeout'] }))
  afterEach(() => mock.timers.reset())
  const turn = () => new Promise<void>((resolve) => setImmediate(resolve))

  /** starts a call, lets it reach the answerer, advances the clock by `ms`, and returns what it resolved to (if it did) */
  async function after(ctx: Context, ms: number) {
    let result: ToolResult | undefined
    call(ctx, 'write').then((r) => (result = r))
    await turn()
    mock.timers.tick(ms - 1)
    await turn()
    expect(result, `still waiting at ${ms - 1} ms`).to.equal(undefined)
    mock.timers.tick(1)
    await turn()
    await turn()
    return result
  }

  it('an answerer that never answers: denied at the deployment deadline (5 min by default), saying no answer came in time', async () => {
    const ctx = await deployment({})
    const runs: string[] = []
    ctx.tools.register(tool('write', runs))
    const events = audit(ctx)
    const signals: AbortSignal[] = []
    answerer(ctx, 'away', (query) => {
      signals.push(query.signal)
      return new Promise(() => {})
    })
    const result = await after(ctx, 5 * 60_000)
    expect(denial(result!)).to.deep.include({ code: 'DENIED', deniedBy: { stage: 'approval', plugin: 'approval' } })
    expect(result!.content).to.contain('no answer came in time, so it was denied')
    expect(result!.trace?.at(-1)).to.deep.include({ stage: 'approval', decision: 'timed-out', by: 'approval' })
    expect(events.decided.map((e) => [e.outcome, e.answeredBy, e.note])).to.deep.equal([
      ['timed-out', 'away', 'no answer came within 300 s (the approval deadline)'],
    ])
    expect(signals[0].aborted, 'the answerer is told to stop asking').to.equal(true)
    expect(runs).to.deep.equal([])
  })

  it('the deployment deadline is configurable', async () => {
    const ctx = await deployment({ timeoutMs: 2_000 })
    ctx.tools.register(tool('write'))
    answerer(ctx, 'away', () => new Promise(() => {}))
    expect(denial((await after(ctx, 2_000))!)?.code).to.equal('DENIED')
  })

  it('an answerer with a deadline of its own is held to it', async () => {
    const ctx = await deployment({ answerers: { slow: { timeoutMs: 1_500 } } })
    ctx.tools.register(tool('write'))
    const events = audit(ctx)
    answerer(ctx, 'slow', () => new Promise((resolve) => setTimeout(() => resolve({ decision: 'allow' }), 10_000)))
    const result = await after(ctx, 1_500)
    expect(denial(result!)?.code).to.equal('DENIED')
    expect(events.decided.map((e) => [e.outcome, e.answeredBy, e.note])).to.deep.equal([
      ['timed-out', 'slow', 'no answer came within 1500 ms (the deadline of slow)'],
    ])
  })

  it('a deadline under a name no loaded plugin has is warned about once, with the name it most likely meant', async () => {
    const ctx = await deployment({ answerers: { operater: { timeoutMs: 1_500 }, 'approval-rules': { timeoutMs: 1_000 } } })
    ctx.tools.register(tool('write'))
    const warnings: string[] = []
    const target = { levels: { base: 2 }, record: (record: { type: string; content: string }) => record.type === 'warn' && warnings.push(record.content) }
    Logger.targets.push(target as never)
    try {
      counting(ctx, 'allow')
      await assertStarted(ctx)
      expect((await call(ctx, 'write')).isError).to.equal(false)
      expect((await call(ctx, 'write')).isError).to.equal(false)
      expect(warnings.filter((w) => w.includes('answerers.'))).to.deep.equal([
        'answerers.operater names no loaded plugin, so its deadline applies to nothing; did you mean operator?',
      ])
    } finally {
      Logger.targets.splice(Logger.targets.indexOf(target as never), 1)
    }
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
    [
      'an answerer throwing a value with no message to read',
      (ctx: Context) =>
        answerer(ctx, 'broken', () => {
          throw Object.create(null)
        }),
    ],
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
    expect(await service(ctx).grants()).to.deep.equal([])
    expect(events.decided.map((e) => [e.outcome, e.answeredBy])).to.deep.equal([['cancelled', 'caller']])
    expect(runs).to.deep.equal([])
  })
})

describe('approval: policies and what needs approval', () => {
  it('never rejects without asking anyone', async () => {
    const ctx = await deployment({ policy: 'never' })
    ctx.tools.register(tool('write'))
    const events = audit(ctx)
    const operator = counting(ctx, 'allow')
    expect(denial(await call(ctx, 'write'))?.code).to.equal('DENIED')
    expect(operator.asked).to.equal(0)
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
    const error = await deployment({ rules: [{ tool: 'write', arguments: { path: '^src/' }, decision: 'allow' }] }).catch((e) => e)
    expect(String(error)).to.contain('rule "rules[0]"')
  })
})

describe('approval: a grant recorded while a request waits answers it', () => {
  let dir: string
  beforeEach(async () => (dir = await mkdtemp(join(tmpdir(), 'faber-approval-'))))
  afterEach(() => rm(dir, { recursive: true, force: true }))

  /** an answerer that never answers, and stops when told to */
  function away(ctx: Context) {
    const signals: AbortSignal[] = []
    answerer(ctx, 'away', (query) => {
      signals.push(query.signal)
      return new Promise((resolve) => query.signal.addEventListener('abort', () => resolve(undefined)))
    })
    return signals
  }

  it('one recorded in this process: at once, and the answerer still asking is told to stop', async () => {
    const ctx = await deployment({})
    const runs: string[] = []
    ctx.tools.register(tool('write', runs))
    const events = audit(ctx)
    const signals = away(ctx)
    const pending = call(ctx, 'write')
    while (signals.length === 0) await new Promise((resolve) => setImmediate(resolve))
    await service(ctx).grant({ tool: 'write', scope: 'session', decision: 'allow' })
    expect((await pending).isError).to.equal(false)
    expect(runs).to.deep.equal(['write'])
    expect(events.decided.map((e) => [e.outcome, e.answeredBy])).to.deep.equal([['allowed', 'approval-rules']])
    expect(events.decided[0].note).to.match(/^decided by grant .+, recorded while the request waited$/)
    expect(signals[0].aborted).to.equal(true)
  })

  it('one another process commits to the shared store (an always answer there, faber grants import): once seen', async () => {
    const path = join(dir, 'faber.db')
    const ctx = await deployment({ grantWatchMs: 50 }, { store: path })
    const runs: string[] = []
    ctx.tools.register(tool('write', runs))
    const signals = away(ctx)
    const pending = call(ctx, 'write')
    while (signals.length === 0) await new Promise((resolve) => setImmediate(resolve))
    const other = await deployment({}, { store: path })
    await service(other).grant({ tool: 'write', scope: 'always', decision: 'reject' })
    expect(denial(await pending)?.code).to.equal('DENIED')
    expect(runs).to.deep.equal([])
    expect(signals[0].aborted).to.equal(true)
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
    expect((await service(ctx).grants()).map((g) => g.id)).to.not.include(once.id)
    expect((await call(ctx, 'write', {}, { agent: a })).isError).to.equal(false)
    expect((await call(ctx, 'write', { other: 1 }, { agent: a })).isError).to.equal(false)
    expect((await call(ctx, 'write', {}, { agent: b })).isError).to.equal(false)
    expect(asked).to.deep.equal(['write@a', 'write@b'])
    const grants = await service(ctx).grants()
    expect(grants.map((g) => [g.tool, g.agent, g.scope, g.decision, g.by])).to.deep.equal([
      ['write', 'a', 'session', 'allow', 'operator'],
      ['write', 'b', 'session', 'allow', 'operator'],
    ])
    expect(await service(ctx).revoke(grants[0].id)).to.equal(true)
    expect(await service(ctx).revoke(grants[0].id)).to.equal(false)
    await call(ctx, 'write', {}, { agent: a })
    expect(asked).to.have.length(3)
  })

  it('a session grant made in one of the sessions an agent serves covers that session only, and ends with it', async () => {
    const ctx = await deployment({})
    ctx.tools.register(tool('write'))
    const asked: string[] = []
    answerer(ctx, 'operator', (query) => {
      asked.push(query.exec.session!)
      return { decision: 'allow', remember: 'session' }
    })
    for (const session of ['s1', 's1', 's2']) expect((await call(ctx, 'write', {}, { session })).isError).to.equal(false)
    expect(asked).to.deep.equal(['s1', 's2'])
    expect((await service(ctx).grants()).map((g) => g.session)).to.deep.equal(['s1', 's2'])
    ctx.emit('tools/session-end', { session: 's1' })
    expect((await service(ctx).grants()).map((g) => g.session)).to.deep.equal(['s2'])
    const always = await service(ctx)
      .grant({ tool: 'x', scope: 'always', session: 's2' })
      .catch((error) => error)
    expect(String(always)).to.contain('an "always" grant outlives every session')
  })

  it('always grants persist in the store and survive a restart', async () => {
    const path = join(dir, 'state', 'faber.db')
    const first = await deployment({}, { store: path })
    first.tools.register(tool('write'))
    answerer(first, 'operator', () => ({ decision: 'allow', remember: 'always' }))
    const events = audit(first)
    expect(service(first).persistent).to.equal(true)
    expect((await call(first, 'write')).isError).to.equal(false)
    expect(events.decided[0]).to.include({ remember: 'always' })
    await first.stop()

    const saved = new SqliteStore(path)
    expect(await new GrantStore(saved).list()).to.have.length(1)
    expect((await new GrantStore(saved).list())[0]).to.include({ tool: 'write', decision: 'allow', by: 'operator', id: events.decided[0].grant })
    await saved.close()

    const second = await deployment({}, { store: path })
    second.tools.register(tool('write'))
    const operator = counting(second, 'reject')
    expect((await call(second, 'write')).isError).to.equal(false)
    expect(operator.asked).to.equal(0)
    const [grant] = await service(second).grants()
    expect(grant).to.include({ tool: 'write', scope: 'always' })
    expect(await service(second).revoke(grant.id)).to.equal(true)
    expect(await service(second).grants()).to.deep.equal([])
    expect(denial(await call(second, 'write'))?.code).to.equal('DENIED')
  })

  it('grants another process adds or revokes take effect at once', async () => {
    const path = join(dir, 'faber.db')
    const ctx = await deployment({}, { store: path })
    ctx.tools.register(tool('deploy'))
    // the operator's connection, as `faber grants` opens it
    const operator = new SqliteStore(path)
    const grants = new GrantStore(operator)
    try {
      expect(denial(await call(ctx, 'deploy'))?.code).to.equal('DENIED')
      await grants.import({ version: 1, grants: [{ id: 'ship-it', tool: 'deploy', decision: 'allow' }] })
      expect((await call(ctx, 'deploy')).isError).to.equal(false)
      expect(await grants.remove('ship-it')).to.equal(true)
      expect(denial(await call(ctx, 'deploy'))?.code).to.equal('DENIED')
    } finally {
      await operator.close()
    }
  })

  it('a row another writer left that is not a grant: a reject one denies every call, an allow one is ignored, each said once', async () => {
    const path = join(dir, 'faber.db')
    const ctx = await deployment({}, { store: path })
    ctx.tools.register(tool('deploy'))
    ctx.tools.register(tool('build'))
    const warnings: string[] = []
    const target = { levels: { base: 2 }, record: (record: { type: string; content: string }) => record.type === 'warn' && warnings.push(record.content) }
    Logger.targets.push(target as never)
    const operator = new SqliteStore(path)
    try {
      await new GrantStore(operator).import({ version: 1, grants: [{ id: 'ship-it', tool: '*', decision: 'allow' }] })
      const insert = operator.db.prepare('INSERT INTO approval_grants (id, tool, arguments, decision, created_at) VALUES (?, ?, ?, ?, ?)')
      expect((await call(ctx, 'deploy')).isError).to.equal(false)
      insert.run('garbled-allow', 'build', '{not json', 'allow', 'now')
      expect((await call(ctx, 'build')).isError, 'an unreadable allow grant is ignored').to.equal(false)
      insert.run('garbled-reject', 'deploy', '{"$.x": "("}', 'reject', 'now')
      for (const name of ['deploy', 'build', 'deploy']) {
        const result = await call(ctx, name)
        expect(denial(result)?.code, `${name}: an unreadable reject grant rejects every call`).to.equal('DENIED')
        expect(result.content).to.contain('rejected by the approver')
      }
      const unreadable = warnings.filter((w) => w.includes('cannot be read'))
      expect(unreadable, 'said once per change of the store, not per call').to.have.length(2)
      expect(unreadable[1]).to.contain('"garbled-reject"').and.contain('every call is rejected until it is fixed or revoked')
      const listed = await new GrantStore(operator).list().catch((error: Error) => error)
      expect(String(listed)).to.match(/the grant "garbled-allow" in .* cannot be read .*faber grants revoke garbled-allow/)
      expect(await new GrantStore(operator).remove('garbled-reject')).to.equal(true)
      expect((await call(ctx, 'deploy')).isError, 'revoked: the other grants stand').to.equal(false)
    } finally {
      await operator.close()
      Logger.targets.splice(Logger.targets.indexOf(target as never), 1)
    }
  })

  it('without a store, always is kept for the session only, and the decision says why', async () => {
    const ctx = await deployment({})
    ctx.tools.register(tool('write'))
    const events = audit(ctx)
    answerer(ctx, 'operator', () => ({ decision: 'allow', remember: 'always' }))
    expect(service(ctx).persistent).to.equal(false)
    expect((await call(ctx, 'write')).isError).to.equal(false)
    expect(events.decided[0]).to.include({ outcome: 'allowed', remember: 'session' })
    expect(events.decided[0].note).to.contain('kept for this session only')
    let error: unknown
    await service(ctx)
      .grant({ tool: 'x', scope: 'always' })
      .catch((e) => (error = e))
    expect(String(error)).to.contain('load @faber/store')
  })

  it('another process holding the store past its busy timeout: the answer stands, kept for the session, and says why', async () => {
    const path = join(dir, 'faber.db')
    const ctx = await kit.deployment({}, (ctx) => {
      started.push(ctx)
      ctx.plugin(DeploymentStore, { path, busyTimeout: 50 })
      ctx.plugin(Approval, {})
    })
    ctx.tools.register(tool('write'))
    const events = audit(ctx)
    answerer(ctx, 'operator', () => ({ decision: 'allow', remember: 'always' }))
    // the other process: takes the write lock, says so, and keeps it until its stdin closes
    const sqlite = createRequire(import.meta.resolve('@faber/store')).resolve('better-sqlite3')
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const db = new (require(${JSON.stringify(sqlite)}))(${JSON.stringify(path)}); db.exec('BEGIN IMMEDIATE'); console.log('held'); process.stdin.on('end', () => { db.exec('COMMIT'); console.log('released') }).resume()`,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    )
    const said = (line: string) => new Promise<void>((resolve) => holder.stdout.on('data', (chunk: Buffer) => chunk.toString().includes(line) && resolve()))
    try {
      await said('held')
      expect((await call(ctx, 'write')).isError).to.equal(false)
      expect(events.decided[0]).to.include({ outcome: 'allowed', remember: 'session' })
      expect(events.decided[0].note).to.match(/^the grant was kept for this session only: the store .*faber\.db cannot be used: database is locked$/)
      expect((await call(ctx, 'write')).isError, 'the session grant answers the next call').to.equal(false)
      expect(events.decided[1]).to.include({ outcome: 'allowed', answeredBy: 'approval-rules' })
      const released = said('released')
      holder.stdin.end()
      await released
      expect((await service(ctx).grants()).map((grant) => grant.scope)).to.deep.equal(['session'])
    } finally {
      holder.kill()
    }
  })

  it('uses a store loaded after it, and stops using one that is unloaded', async () => {
    const ctx = await deployment({})
    expect(service(ctx).persistent).to.equal(false)
    const fork = ctx.plugin(DeploymentStore, { path: join(dir, 'late.db') })
    await assertStarted(ctx)
    expect(service(ctx).persistent).to.equal(true)
    await service(ctx).grant({ tool: 'edit', scope: 'always' })
    expect((await service(ctx).grants()).map((g) => g.scope)).to.deep.equal(['always'])
    fork.dispose()
    expect(service(ctx).persistent).to.equal(false)
    expect(await service(ctx).grants()).to.deep.equal([])
  })
})

describe('approval: exporting and importing grants', () => {
  let dir: string
  let store: SqliteStore
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-grants-'))
    store = new SqliteStore(join(dir, 'faber.db'))
  })
  afterEach(async () => {
    await store.close()
    await rm(dir, { recursive: true, force: true })
  })

  it('round-trips through JSON; an entry without an id gets one from its content', async () => {
    const grants = new GrantStore(store)
    expect(
      await grants.import({
        version: 1,
        grants: [
          { tool: 'read*', decision: 'allow' },
          { id: 'no-rm', tool: 'rm', agent: 'ci', decision: 'reject' },
        ],
      }),
    ).to.equal(2)
    const exported = await grants.export()
    expect(exported.version).to.equal(1)
    expect(exported.grants.map((g) => [g.tool, g.agent, g.decision])).to.deep.equal([
      ['read*', undefined, 'allow'],
      ['rm', 'ci', 'reject'],
    ])
    expect(exported.grants[0].id).to.match(/^f-[0-9a-f]{10}$/)
    // importing the same export again replaces by id: nothing doubles
    await grants.import(exported)
    expect(await grants.list()).to.have.length(2)
    await grants.import({ version: 1, grants: [{ id: 'only', tool: 'x', decision: 'allow' }] }, { replace: true })
    expect((await grants.list()).map((g) => g.id)).to.deep.equal(['only'])
  })

  for (const [what, data, message] of [
    ['not an export', { grants: {} }, '{ "version": 1, "grants": [...] }'],
    [
      'a bad decision',
      {
        version: 1,
        grants: [
          { id: 'a', tool: 'x', decision: 'allow' },
          { tool: 'y', decision: 'maybe' },
        ],
      },
      'grants[1].decision',
    ],
    ['a bad argument path', { version: 1, grants: [{ tool: 'y', arguments: { path: '^src/' }, decision: 'allow' }] }, 'grants[0]: "path" is not a JSON path'],
    [
      // a caller's Proxy whose keys cannot be listed: what it throws has no prototype, so String() of it throws in turn
      'arguments that throw what cannot be shown',
      {
        version: 1,
        grants: [
          {
            tool: 'y',
            decision: 'allow',
            arguments: new Proxy(
              {},
              {
                ownKeys: () => {
                  throw Object.create(null)
                },
              },
            ),
          },
        ],
      },
      'grants[0]: an error that could not be shown',
    ],
  ] as const) {
    it(`refuses ${what}, naming it, and imports nothing`, async () => {
      const grants = new GrantStore(store)
      const error = await grants.import(data).catch((error: unknown) => error)
      expect(error).to.be.instanceOf(TypeError)
      expect(String(error)).to.contain(message)
      expect(await grants.list()).to.deep.equal([])
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

  async function withTerminal(config: Approval.ConfigInput = {}, tty = true, store?: string) {
    const ctx = await deployment(config, { store })
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
    expect(await service(ctx).grants()).to.deep.equal([])
  })

  it('allow for the session records a grant: the next call is not asked', async () => {
    const { ctx, term } = await withTerminal()
    const pending = call(ctx, 'write', { path: 'a' })
    await term.seen('reject: ')
    term.type('s')
    expect((await pending).isError).to.equal(false)
    expect((await call(ctx, 'write', { path: 'b' })).isError).to.equal(false)
    expect(term.text.split('approval needed')).to.have.length(2)
    expect((await service(ctx).grants())[0]).to.include({ tool: 'write', scope: 'session', by: 'approval-terminal' })
  })

  it('offers always when there is a store, and keeps the grant there', async () => {
    const { ctx, term } = await withTerminal({}, true, join(dir, 'faber.db'))
    const pending = call(ctx, 'write')
    await term.seen('reject: ')
    expect(term.text).to.contain('[y] allow once  [s] allow for this session  [a] always allow  [n] reject: ')
    term.type('maybe')
    await term.seen('please answer y, s, a or n: ')
    term.type('a')
    expect((await pending).isError).to.equal(false)
    expect((await service(ctx).grants())[0]).to.include({ tool: 'write', scope: 'always', by: 'approval-terminal' })
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

  it("a person's time at the terminal does not count against the wall-clock budget of the program that made the call", async () => {
    const term = terminal()
    const ctx = await kit.deployment({ mode: 'code', codeLimits: { wallMs: 400 } }, (ctx) => {
      started.push(ctx)
      ctx.plugin(Sandbox, { poolSize: 1 })
      ctx.plugin(Approval, { require: ['write'] })
      ctx.plugin(TerminalAnswerer, { input: term.input, output: term.output })
    })
    const runs: string[] = []
    ctx.tools.register(tool('write', runs))
    const pending = call(ctx, 'run_code', { code: 'return await tools.write({})', description: 'writes' })
    await term.seen('reject: ')
    // the person reads for longer than the program's whole budget
    await new Promise((resolve) => setTimeout(resolve, 700))
    term.type('y')
    const result = await pending
    expect(result.isError, result.content).to.equal(false)
    expect(result.content).to.equal('write done')
    expect(runs).to.deep.equal(['write'])
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
    expect(result.content).to.equal('after read: read done\nafter write: write done\n(the program returned undefined)')
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
    const operator = counting(ctx, 'allow')
    const direct = await call(ctx, 'write')
    expect(denial(direct)?.code).to.equal('UNKNOWN_TOOL')
    expect(operator.asked).to.equal(0)
    expect(events.asked).to.deep.equal([])
    const nested = await call(ctx, 'run_code', { code: `return await tools.write({})`, description: 'one write' })
    expect(nested.isError, nested.content).to.equal(false)
    expect(operator.asked).to.equal(1)
  })
})
