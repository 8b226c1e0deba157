// a program that waits on a person longer than checkpointAfterMs gives its sandbox unit back, and runs again from the
// start once the person answered: the calls it already made are answered from its journal (their bodies do not run
// again), and it goes on live from the call it waited on. one that takes another path on the second run is stopped

import { defineTool, type ToolResult, t, waitOnPerson } from '@faber/core'
import { call, deployment, disposeAll } from '@faber/core/testing'
import Approval, { type ApprovalQuery } from '@faber/plugin-approval'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import { expect } from 'chai'
import type { Context } from 'cordis'

const tiers = [
  ['worker, in-process', WorkerSandboxService, 'in-process'],
  ['isolate, in-process', IsolateSandboxService, 'in-process'],
  ['worker, process tier', WorkerSandboxService, 'process'],
  ['isolate, process tier', IsolateSandboxService, 'process'],
] as const

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function deploy(tier: (typeof tiers)[number], answerAfterMs: number, abort?: AbortController) {
  const [, Sandbox, isolation] = tier
  const bodies: string[] = []
  const ctx = await deployment({ mode: 'code', checkpointAfterMs: 150 }, (ctx) => {
    ctx.plugin(Sandbox, { isolation, poolSize: 1 })
    ctx.plugin(Approval, { require: ['deploy'] })
    ctx.plugin({
      name: 'operator',
      apply: (ctx: Context) =>
        ctx.on('approval/request', async (query: ApprovalQuery) => {
          const answered = waitOnPerson(query.exec)
          try {
            await sleep(answerAfterMs)
            return { decision: 'allow' as const }
          } finally {
            answered()
          }
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
      execute: () => {
        bodies.push('count')
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
  return { ctx, bodies, signal: abort?.signal }
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
      await sleep(600)
      expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, checkpointed: 1 })
      expect(load(ctx).running, 'the unit was given back').to.equal(0)
      const result = await program
      expect(told(result)).to.equal('start\n[1,"deployed",2]')
      expect(bodies).to.deep.equal(['count', 'deploy', 'count'])
      expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, checkpointed: 0 })
    })

    it('is stopped, with nothing new run, when it makes another call on its second run', async () => {
      const { ctx, bodies } = await deploy(tier, 600)
      const result = await runCode(
        ctx,
        'const a = await tools.count({ r: Math.random() })\nconst b = await tools.deploy({})\nconst c = await tools.count({ n: 2 })\nreturn [a, b, c]',
      )
      expect(told(result)).to.match(
        /^error: run_code failed \(diverged\): the program took another path when it was run again after waiting for a person: its call 1 was tools\.count\(\{"r":0\.\d+\}\) the first time and tools\.count\(\{"r":0\.\d+\}\) now\. it was stopped/,
      )
      // the call the person approved ran: it was the first run's; the second run's new calls did not
      expect(bodies).to.deep.equal(['count', 'deploy'])
    })
  })
}

describe('checkpointed programs', function () {
  this.timeout(30_000)
  afterEach(disposeAll)

  it('end as aborted when the run_code call is aborted while they wait', async () => {
    const { ctx, bodies } = await deploy(tiers[0], 5000)
    const abort = new AbortController()
    const program = runCode(ctx, 'await tools.count({})\nreturn await tools.deploy({})', abort.signal)
    await sleep(400)
    expect(ctx.tools.waitingPrograms()).to.deep.include({ checkpointed: 1 })
    abort.abort()
    expect(told(await program)).to.match(/abort/)
    expect(bodies).to.deep.equal(['count'])
    expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, checkpointed: 0 })
  })
})
