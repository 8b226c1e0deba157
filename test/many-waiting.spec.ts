// 1,000 run_code programs waiting on a person at once: checkpointed, they hold no sandbox unit, so the units in use
// never pass the sandbox's maxConcurrent and the programs with a stopped clock never pass maxWaitingPrograms; the host
// still answers a direct call and runs another program meanwhile; answered, every program ends with its own result
// and every body ran once. outcomes and bounds only: what it costs in time and memory is bench/checkpoint.ts'

import { type CodeRuntimeLoad, defineTool, type Json, t } from '@faber/core'
import { call, deployment, disposeAll } from '@faber/core/testing'
import Approval from '@faber/plugin-approval'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import { expect } from 'chai'
import type { Context } from 'cordis'
import { person } from './fixtures/waiting-person.ts'

const COUNT = 1000
const MAX_CONCURRENT = 4
const MAX_WAITING = 16

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

for (const [backend, Sandbox] of [
  ['isolate', IsolateSandboxService],
  ['worker', WorkerSandboxService],
] as const) {
  describe(`${COUNT} programs waiting on a person at once: ${backend}`, function () {
    // the worker backend starts a worker for each program it runs again (a checkpointed run's unit is discarded)
    this.timeout(300_000)
    afterEach(disposeAll)

    it('stay within maxConcurrent units and maxWaitingPrograms, the host answers other calls, and each ends once answered', async () => {
      let answer!: () => void
      const answered = new Promise<void>((resolve) => (answer = resolve))
      const bodies = new Map<string, number>()
      const ctx = await deployment({ mode: 'code', checkpointAfterMs: 1, maxWaitingPrograms: MAX_WAITING }, (ctx) => {
        ctx.plugin(Sandbox, { isolation: 'in-process', maxConcurrent: MAX_CONCURRENT })
        ctx.plugin(Approval, { require: ['deploy'], timeoutMs: 600_000 })
        ctx.plugin({
          name: 'person',
          apply: (ctx: Context) =>
            person(ctx, async () => {
              await answered
              return { decision: 'allow' as const }
            }),
        })
      })
      for (const name of ['count', 'deploy', 'echo']) {
        ctx.tools.register(
          defineTool({
            name,
            description: name,
            parameters: t.object({ i: t.number() }),
            output: { schema: t.unknown() },
            execute: ({ i }): Json => {
              const key = `${name} ${i}`
              bodies.set(key, (bodies.get(key) ?? 0) + 1)
              return name === 'deploy' ? `deployed ${i}` : i
            },
          }),
        )
      }
      const runtime = ctx.get('codeRuntime') as { load(): CodeRuntimeLoad }
      const programs = Array.from({ length: COUNT }, (_, i) =>
        call(ctx, 'run_code', { code: `const a = await tools.count({ i: ${i} })\nreturn [a, await tools.deploy({ i: ${i} })]`, description: 'deploys' }),
      )
      while (ctx.tools.waitingPrograms().checkpointed < COUNT) await sleep(20)
      // the peaks since the deployment started: every moment counts, not samples
      expect(runtime.load().peakRunning, 'units in use at once').to.equal(MAX_CONCURRENT)
      expect(ctx.tools.waitingPrograms().peakWaiting, 'programs waiting with a stopped clock at once').to.be.within(1, MAX_WAITING)
      expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, checkpointed: COUNT })
      expect(runtime.load().running, 'no unit is held while they wait').to.equal(0)

      // the host still answers: a direct call (with run_code the only tool on the wire, through a program) and a program
      const other = await call(ctx, 'run_code', { code: 'return await tools.echo({ i: -1 })', description: 'echoes' })
      expect(other.isError ? other.error.message : other.content).to.equal('-1')

      answer()
      const results = await Promise.all(programs)
      const failed = results.filter((result, i) => result.isError || result.content !== `[${i},"deployed ${i}"]`)
      expect(failed.map((r) => r.content).slice(0, 3)).to.deep.equal([])
      expect(
        [...bodies.values()].every((n) => n === 1),
        'each body ran once',
      ).to.equal(true)
      expect(bodies.size).to.equal(2 * COUNT + 1)
      expect(ctx.tools.waitingPrograms()).to.deep.include({ waiting: 0, checkpointed: 0 })
    })
  })
}
