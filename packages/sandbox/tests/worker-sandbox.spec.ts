import { expect } from 'chai'
import WorkerSandboxService, { ProcessSandbox, WorkerSandbox, workerBackend } from '../src/index.ts'
import { describeHandoff, describeHazards, describeHostile, describePool, hazardLimits } from '../src/testing/index.ts'
import type { BridgeReply } from '../src/types.ts'

describeHazards('worker-vm', () => new WorkerSandbox({ poolSize: 2, limits: hazardLimits }))
// the default tier for programs a model wrote
describeHazards('worker-vm, process tier', () => new ProcessSandbox({ poolSize: 2, limits: hazardLimits, backend: workerBackend }))
describePool('worker-vm', (poolSize, maxConcurrent) => new WorkerSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), WorkerSandboxService)
describeHostile('worker-vm')
// a backend outside this workspace's three names its module (README, "Testing a backend"): before `from`, the suite's
// hosts knew only those three, and died on any other name. the leaks only: the bombs are the line above's
describeHostile('worker-vm named by its module', {
  bombsIn: [],
  from: { module: new URL('../src/index.ts', import.meta.url).href, sandbox: 'WorkerSandbox', backend: 'workerBackend' },
})

// the hand-off of nested calls, as configured by default and with a generous spinMs so that both sides spin on a loaded
// machine too: the hazards that involve a nested call, where the spin happens
describeHandoff(
  'worker-vm',
  (options) => new WorkerSandbox({ ...options, limits: hazardLimits }),
  WorkerSandboxService,
  [undefined, 1],
  ({ run, kind }) => {
    it('spins for a reply only once the microtasks the program queued after its call have run', async () => {
      // a chain of 200 microtasks started after the call: a reply handed in before the chain ended would resume the
      // program's await in the middle of it. (a slow host, or a reply through the port, comes after it anyway)
      // as the program starts, and once it awaited something (a call then is made inside a microtask)
      const code = `let n = 0
if (globalThis.later) await tools.echo({})
const pending = tools.echo({ i: 1 })
;(async () => { for (let i = 0; i < 200; i++) { await null; n++ } })()
const back = await pending
return [back.i, n]`
      for (let i = 0; i < 10; i++) expect(kind(await run(code))).to.equal('ok [1,200]')
      for (let i = 0; i < 10; i++) expect(kind(await run(`globalThis.later = true\n${code}`))).to.equal('ok [1,200]')
      const sequential = 'let n = 0\nfor (let i = 0; i < 50; i++) { Promise.resolve().then(() => n++); await tools.echo({ i }) }\nreturn n'
      expect(kind(await run(sequential))).to.equal('ok 50')
    })
  },
)

describe('worker-vm: hand-off back-off', () => {
  it("backs off the worker's spins on its own misses, while the host's spins for its next call catch", async () => {
    // a tool slower than any spin: the worker's spin for each reply misses, the host's for the call after it catches
    // (the program calls again at once). one side's catches must not start the other's back-off again: the worker spun
    // for every third call so, for as long as the tool is slow (a miss costs spinMs of a core each time)
    // spinMs 1: the host's spin outlasts the worker's wake-up on a loaded machine too, so that it catches
    const sandbox = new WorkerSandbox({ poolSize: 0, spinMs: 1, limits: hazardLimits })
    try {
      const slow = async (_: string, json: string): Promise<BridgeReply> => {
        await new Promise((resolve) => setTimeout(resolve, 20))
        return { ok: true, value: json }
      }
      const before = sandbox.handoffStats().replies
      const outcome = await sandbox.run({
        code: 'for (let i = 0; i < 40; i++) await tools.echo({ i })\nreturn 1',
        tools: ['echo'],
        call: slow,
        signal: new AbortController().signal,
        limits: { ...hazardLimits, cpuMs: 10000, wallMs: 30000 },
      })
      expect(outcome).to.deep.include({ ok: true, result: '1' })
      const after = sandbox.handoffStats().replies
      // misses in a row make the next 2, 4, 8, 16 … calls sleep: 5 spins in 40 calls (every second or third call before; room
      // for a spin that caught a reply by being held off its core for 20 ms)
      expect(after.caught + after.missed - before.caught - before.missed).to.be.at.most(10)
    } finally {
      await sandbox.close()
    }
  })
})
