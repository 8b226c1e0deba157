// waiting for a person is not computing: a run_code program whose nested call waits on a person (an approval answered
// by someone) keeps its wall-clock budget meanwhile, on every backend and tier, while its cpu budget and the approval's
// own deadline still hold. the measurement, scaled down: two answers after 0.7 s each against wallMs 500 was a timeout

import { defineTool, type ToolResult, t, waitOnPerson } from '@faber/core'
import { call, deployment, disposeAll } from '@faber/core/testing'
import Approval, { type ApprovalQuery, WebAnswerer } from '@faber/plugin-approval'
import { inspect } from '@faber/plugin-tool-cordis'
import WorkerSandboxService from '@faber/sandbox'
import { tiersOf } from '@faber/sandbox/testing'
import IsolateSandboxService from '@faber/sandbox-isolate'
import { expect } from 'chai'
import type { Context } from 'cordis'

const tiers = tiersOf({ worker: WorkerSandboxService, isolate: IsolateSandboxService })

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** a tool that needs approval, recording each time its body runs */
const deployTool = (runs: string[]) =>
  defineTool({
    name: 'deploy',
    description: 'deploys',
    parameters: t.object({}),
    output: { schema: t.string() },
    execute: () => {
      runs.push('deploy')
      return 'deployed'
    },
  })

interface Answerer {
  /** ms before it answers; undefined: never */
  afterMs?: number
  /** whether it says a person answers (waitOnPerson) */
  person: boolean
  /** an answerer that gets its wait wrong: never gives it back, or takes it only after it answered (the call ended) */
  leaks?: 'never released' | 'taken late'
}

async function deploy(tier: (typeof tiers)[number], answerer: Answerer, config: { approvalMs?: number; maxWaitingPrograms?: number; cpuMs?: number } = {}) {
  const [, Sandbox, isolation] = tier
  const runs: string[] = []
  const ctx = await deployment(
    { mode: 'code', codeLimits: { wallMs: 500, cpuMs: config.cpuMs ?? 2000 }, maxWaitingPrograms: config.maxWaitingPrograms },
    (ctx) => {
      ctx.plugin(Sandbox, { isolation, poolSize: 1 })
      ctx.plugin(Approval, { require: ['deploy'], timeoutMs: config.approvalMs ?? 60_000 })
      ctx.plugin({
        name: 'operator',
        apply: (ctx: Context) =>
          ctx.on('approval/request', async (query: ApprovalQuery) => {
            if (answerer.leaks === 'taken late') setTimeout(() => waitOnPerson(query.exec), 100)
            const taken = answerer.person ? waitOnPerson(query.exec) : () => {}
            const answered = answerer.leaks === 'never released' ? () => {} : taken
            try {
              if (answerer.afterMs === undefined) return await new Promise(() => {})
              await sleep(answerer.afterMs)
              return { decision: 'allow' as const }
            } finally {
              answered()
            }
          }),
      })
    },
  )
  ctx.tools.register(deployTool(runs))
  await (ctx.get('codeRuntime') as { ready?(): Promise<void> }).ready?.()
  return { ctx, runs }
}

const runCode = (ctx: Context, code: string) => call(ctx, 'run_code', { code, description: 'deploys after approval' })
const told = (result: ToolResult) => (result.isError ? `error: ${result.error.message}` : result.content)

for (const tier of tiers) {
  describe(`a program waiting on a person: ${tier[0]}`, function () {
    this.timeout(30_000)
    afterEach(disposeAll)

    it('keeps its wall-clock budget while a person answers, and goes on when they did', async () => {
      const { ctx, runs } = await deploy(tier, { person: true, afterMs: 700 })
      const result = await runCode(ctx, 'const a = await tools.deploy({})\nconst b = await tools.deploy({})\nreturn [a, b]')
      expect(told(result)).to.equal('["deployed","deployed"]')
      expect(runs).to.deep.equal(['deploy', 'deploy'])
      expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, peakWaiting: 1, refused: 0 })
    })

    it('runs out of wall-clock time while an answerer that is not a person takes as long', async () => {
      const { ctx, runs } = await deploy(tier, { person: false, afterMs: 700 })
      const result = await runCode(ctx, 'return await tools.deploy({})')
      expect(told(result)).to.match(/^error: run_code failed \(timeout\): the program did not finish within 500 ms of wall-clock time/)
      expect(runs).to.deep.equal([])
    })

    it('is told the approval was denied for want of an answer when the person never answers, not that it timed out', async () => {
      const { ctx, runs } = await deploy(tier, { person: true }, { approvalMs: 700 })
      const result = await runCode(ctx, 'try { await tools.deploy({}) } catch (e) { return e.message }')
      expect(told(result)).to.match(/needs approval .* but no answer came in time, so it was denied/)
      expect(runs).to.deep.equal([])
    })

    it('still obeys its cpu budget while it waits', async () => {
      const { ctx } = await deploy(tier, { person: true, afterMs: 3000 }, { cpuMs: 300 })
      const started = performance.now()
      const result = await runCode(ctx, 'const waiting = tools.deploy({})\nwhile (true) {}')
      expect(told(result)).to.match(/^error: run_code failed \(timeout\): the program computed for more than 300 ms of CPU time/)
      expect(performance.now() - started).to.be.below(2500)
    })
  })
}

describe('the answerers that ask a person', function () {
  this.timeout(30_000)
  afterEach(disposeAll)

  it('the web view: a program keeps its wall-clock budget until someone answers there', async () => {
    const runs: string[] = []
    const ctx = await deployment({ mode: 'code', codeLimits: { wallMs: 500 } }, (ctx) => {
      ctx.plugin(WorkerSandboxService, { poolSize: 1 })
      ctx.plugin(Approval, { require: ['deploy'] })
      ctx.plugin(WebAnswerer)
    })
    ctx.tools.register(deployTool(runs))
    const program = runCode(ctx, 'return await tools.deploy({})')
    await sleep(700)
    const [query] = ctx.approvalWeb.pending()
    expect(ctx.tools.waitingPrograms().waiting).to.equal(1)
    expect(ctx.approvalWeb.answer(query.id, { decision: 'allow' })).to.equal(true)
    expect(told(await program)).to.equal('deployed')
    expect(runs).to.deep.equal(['deploy'])
  })
})

describe('an answerer that gets its wait on a person wrong', function () {
  this.timeout(30_000)
  afterEach(disposeAll)

  for (const leaks of ['never released', 'taken late'] as const) {
    it(`${leaks}: holds nothing past its call, and the program's wall clock runs again`, async () => {
      // the program's cpu budget (2 s) is far past its wall-clock budget (500 ms): a clock left stopped ends it on cpu
      const { ctx, runs } = await deploy(tiers[0], { person: leaks === 'never released', afterMs: 50, leaks })
      const result = await runCode(ctx, 'await tools.deploy({})\nwhile (true) {}')
      expect(told(result)).to.match(/^error: run_code failed \(timeout\): the program did not finish within 500 ms of wall-clock time/)
      expect(runs).to.deep.equal(['deploy'])
      expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, checkpointed: 0 })
    })
  }
})

describe('programs waiting on a person at once', function () {
  this.timeout(30_000)
  afterEach(disposeAll)

  it('are bounded by maxWaitingPrograms: past it the clock runs on, and the model is told why it ran out', async () => {
    const { ctx, runs } = await deploy(tiers[0], { person: true, afterMs: 700 }, { maxWaitingPrograms: 1 })
    const first = runCode(ctx, 'return await tools.deploy({})')
    // the first waits before the second asks
    await sleep(200)
    const seen = inspect(ctx).services.find((service) => service.name === 'codeRuntime')?.load
    expect(seen?.waiting).to.deep.equal({ waiting: 1, maxWaiting: 1, peakWaiting: 1, refused: 0, checkpointed: 0 })
    const second = await runCode(ctx, 'return await tools.deploy({})')
    expect(told(second)).to.match(/^error: run_code failed \(timeout\): .*1 other program was already waiting, the most maxWaitingPrograms allows/)
    expect(told(await first)).to.equal('deployed')
    expect(runs).to.deep.equal(['deploy'])
    expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, peakWaiting: 1, refused: 1 })
  })
})
