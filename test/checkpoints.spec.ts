// a program that waits on a person longer than checkpointAfterMs gives its sandbox unit back, and runs again from the
// start once the person answered: the calls it already made are answered from its journal (their bodies do not run
// again), and it goes on live from the call it waited on. one that takes another path on the second run is stopped

import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { defineTool, type ToolResult, t } from '@faber/core'
import { call, deployment, disposeAll } from '@faber/core/testing'
import Approval from '@faber/plugin-approval'
import WorkerSandboxService from '@faber/sandbox'
import { tiersOf } from '@faber/sandbox/testing'
import IsolateSandboxService from '@faber/sandbox-isolate'
import DeploymentStore from '@faber/store'
import { expect } from 'chai'
import type { Context } from 'cordis'
import { never, person } from './fixtures/waiting-person.ts'

const tiers = tiersOf({ worker: WorkerSandboxService, isolate: IsolateSandboxService })

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
/** resolves once `check` holds, looking every 10 ms (a loaded machine makes any fixed pause a guess) */
async function until(check: () => boolean) {
  while (!check()) await sleep(10)
}

/**
 * the person answers `answerAfterMs` after the program was checkpointed; for Infinity, never (stopping once the request
 * was answered elsewhere); for 'hangs', never, nor stops
 */
async function deploy(tier: (typeof tiers)[number], answerAfterMs: number | 'hangs', abort?: AbortController, store?: string) {
  const [, Sandbox, isolation] = tier
  const bodies: string[] = []
  const counted: unknown[] = []
  const ctx = await deployment({ mode: 'code', checkpointAfterMs: 150, codeLimits: { cpuMs: 500 } }, (ctx) => {
    ctx.plugin(Sandbox, { isolation, poolSize: 1 })
    if (store) ctx.plugin(DeploymentStore, { path: store })
    ctx.plugin(Approval, { require: ['deploy'], grantWatchMs: 50 })
    ctx.plugin({
      name: 'operator',
      inject: ['tools'],
      apply: (ctx: Context) =>
        person(ctx, async (query) => {
          await until(() => query.signal.aborted || ctx.tools.waitingPrograms().checkpointed > 0)
          if (answerAfterMs === 'hangs') return new Promise<undefined>(() => {})
          // a person who never answers here, and stops when the request is answered elsewhere
          if (answerAfterMs === Number.POSITIVE_INFINITY) return never(query)
          await sleep(answerAfterMs)
          return { decision: 'allow' as const }
        }),
    })
  })
  let count = 0
  ctx.tools.register(
    defineTool({
      name: 'count',
      description: 'counts',
      parameters: t.record(t.unknown()),
      output: { schema: t.number() },
      execute: (args) => {
        bodies.push('count')
        counted.push(args)
        return ++count
      },
    }),
  )
  ctx.tools.register(
    defineTool({
      name: 'deploy',
      description: 'deploys',
      parameters: t.object({}),
      output: { schema: t.string() },
      execute: () => {
        bodies.push('deploy')
        return 'deployed'
      },
    }),
  )
  await (ctx.get('codeRuntime') as { ready?(): Promise<void> }).ready?.()
  return { ctx, bodies, counted, signal: abort?.signal }
}

const runCode = (ctx: Context, code: string, signal?: AbortSignal) => call(ctx, 'run_code', { code, description: 'deploys after approval' }, { signal })
const told = (result: ToolResult) => (result.isError ? `error: ${result.error.message}` : result.content)
const load = (ctx: Context) => (ctx.get('codeRuntime') as { load(): { running: number } }).load()

for (const tier of tiers) {
  describe(`a program checkpointed while it waits on a person: ${tier[0]}`, function () {
    this.timeout(30_000)
    afterEach(disposeAll)

    it('gives its sandbox unit back, runs again once answered, and no body it ran runs twice', async () => {
      const { ctx, bodies } = await deploy(tier, 900)
      const program = runCode(
        ctx,
        'console.log("start")\nconst a = await tools.count({ n: 1 })\nconst b = await tools.deploy({})\nconst c = await tools.count({ n: 2 })\nreturn [a, b, c]',
      )
      await until(() => ctx.tools.waitingPrograms().checkpointed === 1)
      await sleep(100)
      expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, checkpointed: 1 })
      expect(load(ctx).running, 'the unit was given back').to.equal(0)
      const result = await program
      expect(told(result)).to.equal('start\n[1,"deployed",2]')
      expect(bodies).to.deep.equal(['count', 'deploy', 'count'])
      expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, checkpointed: 0 })
    })

    it('reads the clock and Math.random on its second run as it did on its first, so its calls match', async () => {
      const { ctx, bodies, counted } = await deploy(tier, 600)
      const result = await runCode(
        ctx,
        [
          'const r = Math.random(), t = Date.now(), d = new Date().toISOString(), s = Date()',
          'const a = await tools.count({ r, t, d, s })',
          'const b = await tools.deploy({})',
          'return [r, t, d, s, a, b, Math.random() !== r, new Date(2020, 1, 1).getFullYear(), new Date() instanceof Date]',
          // Date and Math.random stay themselves as a program sees them: no enumerable keys of Date's own, native code, a
          // subclass of Date works
          '  .concat([Object.keys(Date).length, /native code/.test(String(Date)), /native code/.test(String(Math.random)), new (class extends Date {})(0).getTime()])',
        ].join('\n'),
      )
      expect(result.isError, told(result)).to.equal(false)
      const [r, t, d, s, ...rest] = JSON.parse(result.content)
      expect(counted).to.deep.equal([{ r, t, d, s }])
      expect(rest).to.deep.equal([1, 'deployed', true, 2020, true, 0, true, true, 0])
      expect(bodies).to.deep.equal(['count', 'deploy'])
    })

    it('is stopped, with nothing new run, when it makes another call on its second run', async () => {
      const { ctx, bodies } = await deploy(tier, 600)
      const program = runCode(
        ctx,
        "const a = await tools.count({ found: (await tools.$search('zebra')).length })\nconst b = await tools.deploy({})\nconst c = await tools.count({ n: 2 })\nreturn [a, b, c]",
      )
      // while it is checkpointed, a tool its $search finds on the second run appears
      await until(() => ctx.tools.waitingPrograms().checkpointed === 1)
      ctx.tools.register(defineTool({ name: 'zebra', description: 'a zebra', parameters: t.object({}), output: { schema: t.null() }, execute: () => null }))
      const result = await program
      expect(told(result)).to.match(
        /^error: run_code failed \(diverged\): the program took another path when it was run again after waiting for a person: its call 1 was tools\.count\(\{"found":0\}\) the first time and tools\.count\(\{"found":1\}\) now\. it was stopped/,
      )
      // the call the person approved ran: it was the first run's; the second run's new calls did not
      expect(bodies).to.deep.equal(['count', 'deploy'])
    })

    it('obeys its cpu budget on its second run: a loop that never ends before the call it waited on is stopped', async () => {
      const { ctx, bodies } = await deploy(tier, 600)
      const program = runCode(
        ctx,
        "if ((await tools.$search('zebra')).length > 0) while (true) {}\nconst a = await tools.count({})\nreturn await tools.deploy({})",
      )
      await until(() => ctx.tools.waitingPrograms().checkpointed === 1)
      ctx.tools.register(defineTool({ name: 'zebra', description: 'a zebra', parameters: t.object({}), output: { schema: t.null() }, execute: () => null }))
      expect(told(await program)).to.match(/^error: run_code failed \(timeout\): the program computed for more than 500 ms of CPU time/)
      expect(bodies).to.deep.equal(['count', 'deploy'])
    })
  })
}

describe('checkpointed programs', function () {
  this.timeout(30_000)
  afterEach(disposeAll)

  it('run again when another process sharing the store records a grant that answers the call they wait on', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'faber-checkpoint-'))
    try {
      const store = join(dir, 'faber.db')
      const { ctx, bodies } = await deploy(tiers[1], Number.POSITIVE_INFINITY, undefined, store)
      const program = runCode(ctx, 'const a = await tools.count({})\nreturn [a, await tools.deploy({})]')
      await until(() => ctx.tools.waitingPrograms().checkpointed === 1)
      const other = await deployment({}, (ctx) => {
        ctx.plugin(DeploymentStore, { path: store })
        ctx.plugin(Approval, {})
      })
      await (other.approval as Approval).grant({ tool: 'deploy', scope: 'always', decision: 'allow' })
      expect(told(await program)).to.equal('[1,"deployed"]')
      expect(bodies).to.deep.equal(['count', 'deploy'])
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('run again once the call they waited on was decided, though its answerer never returns', async () => {
    // the answerer took a wait on a person for the call and never gives it back: the call's end gives it back
    const { ctx, bodies } = await deploy(tiers[0], 'hangs')
    const program = runCode(ctx, 'const a = await tools.count({})\nreturn [a, await tools.deploy({})]')
    await until(() => ctx.tools.waitingPrograms().checkpointed === 1)
    await (ctx.approval as Approval).grant({ tool: 'deploy', scope: 'once', decision: 'allow' })
    expect(told(await program)).to.equal('[1,"deployed"]')
    expect(bodies).to.deep.equal(['count', 'deploy'])
    expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, checkpointed: 0 })
  })

  it('end as aborted when the run_code call is aborted while they wait', async () => {
    const { ctx, bodies } = await deploy(tiers[0], 5000)
    const abort = new AbortController()
    const program = runCode(ctx, 'await tools.count({})\nreturn await tools.deploy({})', abort.signal)
    await until(() => ctx.tools.waitingPrograms().checkpointed === 1)
    abort.abort()
    expect(told(await program)).to.match(/abort/)
    expect(bodies).to.deep.equal(['count'])
    expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, checkpointed: 0 })
  })
})
