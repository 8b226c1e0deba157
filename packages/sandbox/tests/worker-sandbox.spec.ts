import { expect } from 'chai'
import { Context } from 'cordis'
import WorkerSandboxService, { type BridgeReply, type CodeRunLimits, type CodeRunOutcome, WorkerSandbox } from '../src/index.ts'
import { describeHazards, describeHostile, describePool, hazardLimits } from '../src/testing/index.ts'

describeHazards('worker-vm', () => new WorkerSandbox({ poolSize: 2, limits: hazardLimits }))
describePool('worker-vm', (poolSize, maxConcurrent) => new WorkerSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), WorkerSandboxService)
describeHostile('worker-vm')

// the hand-off of nested calls, as configured by default and with a generous spinMs so that both sides spin on a loaded
// machine too: the hazards that involve a nested call, where the spin happens
for (const spinMs of [undefined, 1])
  describe(`worker-vm: hand-off (spinMs ${spinMs ?? 'by default'})`, function () {
    this.timeout(20000)
    let sandbox: WorkerSandbox
    let late = 0
    let settled = false
    let waiting: (() => void) | undefined
    before(() => {
      sandbox = new WorkerSandbox({ poolSize: 1, limits: hazardLimits, spinMs })
    })
    after(() => sandbox.close())
    const call = async (name: string, json: string): Promise<BridgeReply> => {
      if (settled) late++
      if (name === 'never') {
        waiting?.()
        return new Promise(() => {})
      }
      if (name === 'fail') return { ok: false, message: 'no', code: 'E_NO' }
      // a slow host: the answer comes from a later turn of the event loop, after a timer
      if (name === 'slow') await new Promise((resolve) => setTimeout(resolve, 10))
      return { ok: true, value: json }
    }
    const run = async (code: string, signal = new AbortController().signal, limits: Partial<CodeRunLimits> = {}) => {
      settled = false
      const outcome = await sandbox.run({ code, tools: ['echo', 'never', 'fail', 'slow'], call, signal, limits: { ...hazardLimits, ...limits } })
      settled = true
      return outcome
    }
    const kind = (outcome: CodeRunOutcome) => (outcome.ok ? `ok ${outcome.result}` : outcome.kind)

    it('answers sequential calls, calls under Promise.all and failed calls', async () => {
      const code =
        'let n = 0\nfor (let i = 0; i < 200; i++) n += (await tools.echo({ i })).i\nconst all = await Promise.all([1, 2, 3].map((i) => tools.echo({ i })))\n' +
        'try { await tools.fail({}) } catch (e) { return [n, all.length, e.code] }'
      // roomy budgets: this asserts the answers (a loaded machine took over a second of wall time for these 200 calls)
      expect(await run(code, undefined, { cpuMs: 5000, wallMs: 20000 })).to.deep.include({ ok: true, result: '[19900,3,"E_NO"]' })
    })

    it('keeps each call and reply whole and in order, whichever way it crosses (the ring, or the port when it is too long)', async () => {
      // sizes around a ring message's limit (4096 code units) and past it, enough calls for the ring to wrap many times,
      // text outside ASCII, lone surrogates (escaped by JSON), and lines printed between the calls
      const code = `const sizes = [0, 1, 2, 99, 4000, 4086, 4087, 4088, 4089, 4100, 9000, 40000]
const seen = []
for (let i = 0; i < 120; i++) {
  const text = ('é☃😀\\ud800' + i).repeat(sizes[i % sizes.length])
  const back = await tools.echo({ i, text })
  if (back.i !== i || back.text !== text) return 'mismatch at ' + i
  if (i % 7 === 0) console.log(i)
  seen.push(back.i)
}
const all = await Promise.all(sizes.map((n, i) => tools.echo({ i, text: 'x'.repeat(n) })))
return seen.length + ' ' + all.map((r) => r.text.length).join()`
      const outcome = await run(code, undefined, { cpuMs: 10000, wallMs: 20000 })
      expect(outcome).to.deep.include({ ok: true, result: '"120 0,1,2,99,4000,4086,4087,4088,4089,4100,9000,40000"' })
      expect(outcome.logs).to.deep.equal(Array.from({ length: 18 }, (_, k) => String(7 * k)))
    })

    it('counts what it handed off: every call and every reply, through the ring or the port, and the spins', async () => {
      // on a sandbox of its own that keeps no unit warm: the shared one refills its pool in the background as a run takes
      // its unit, and that unit's warm-up run (a call, its outcome, a reply) would count too when it lands meanwhile
      const shared = sandbox
      sandbox = new WorkerSandbox({ poolSize: 0, limits: hazardLimits, spinMs })
      try {
        const before = sandbox.handoffStats()
        expect(kind(await run('for (let i = 0; i < 100; i++) await tools.echo({ i })\nreturn 1'))).to.equal('ok 1')
        const after = sandbox.handoffStats()
        const sent = (lane: 'calls' | 'replies') => after[lane].ring + after[lane].port - before[lane].ring - before[lane].port
        // the worker's messages are the calls and its outcome; a reply each
        expect(sent('calls')).to.equal(101)
        expect(sent('replies')).to.equal(100)
        for (const lane of ['calls', 'replies'] as const)
          expect(after[lane].caught + after[lane].missed).to.be.at.least(before[lane].caught + before[lane].missed)
      } finally {
        await sandbox.close()
        sandbox = shared
      }
    })

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

    it('stops a spin after a call (cpu), allocation after a call (memory) and a flood after a call (output)', async () => {
      expect(kind(await run('await tools.echo({})\nwhile (true) {}'))).to.equal('timeout')
      const allocate = 'await tools.echo({})\nconst keep = []\nwhile (true) keep.push(new Array(1e5).fill(1.5))'
      expect(kind(await run(allocate, undefined, { cpuMs: 5000, wallMs: 5000 }))).to.equal('memory')
      expect(kind(await run('await tools.echo({})\nwhile (true) console.log("flood")'))).to.equal('output-limit')
    })

    it('stops a program that computes right after a call it never awaits, while the host answers it (cpu)', async () => {
      expect(kind(await run('tools.echo({})\nwhile (true) {}'))).to.equal('timeout')
      expect(kind(await run('const p = tools.echo({ a: 2 })\nfor (let i = 0; i < 1e6; i++) {}\nreturn (await p).a'))).to.equal('ok 2')
    })

    it('answers a slow host, and the waits are not the program’s cpu', async () => {
      // 60 answers that each come after a 10 ms timer: at least 600 ms of waiting against a cpu budget of 300 ms, which
      // leaves a loaded machine room for the program's own time (the worker's active time counts waiting for a core)
      const code = 'let n = 0\nfor (let i = 0; i < 60; i++) n += (await tools.slow({ i })).i\nreturn n'
      expect(kind(await run(code, undefined, { cpuMs: 300, wallMs: 20000 }))).to.equal('ok 1770')
      expect(kind(await run('return (await tools.echo({ a: 3 })).a'))).to.equal('ok 3')
    })

    it('answers thousands of calls waiting at once, run after run', async () => {
      const code =
        'let n = 0\nfor (let round = 0; round < 3; round++) for (const r of await Promise.all(Array.from({ length: 1000 }, (_, i) => tools.echo({ i })))) n += r.i\nreturn n'
      for (let i = 0; i < 2; i++) expect(kind(await run(code, undefined, { cpuMs: 5000, wallMs: 10000 }))).to.equal('ok 1498500')
    })

    it('ends a run that waits on the host when aborted, and serves the next', async () => {
      const controller = new AbortController()
      const asked = new Promise<void>((resolve) => (waiting = resolve))
      const outcome = run('await tools.echo({})\nawait tools.never({})', controller.signal)
      // aborted once the run waits on the host's answer to never
      await asked
      controller.abort()
      expect(kind(await outcome)).to.equal('abort')
      expect(kind(await run('return (await tools.echo({ a: 1 })).a'))).to.equal('ok 1')
      expect(late).to.equal(0)
    })
  })

describe('worker-vm: the service config', () => {
  it('takes spinMs (0.05 by default, at most 1) and hands it to the sandbox; a misspelling names it', () => {
    expect(WorkerSandboxService.Config({}).spinMs).to.equal(0.05)
    expect(WorkerSandboxService.Config({ spinMs: 0 }).spinMs).to.equal(0)
    expect(() => WorkerSandboxService.Config({ spinMs: 2 })).to.throw()
    expect(() => WorkerSandboxService.Config({ spinMS: 0.1 } as never)).to.throw(/spinMs/)
    const ctx = new Context()
    const service = new WorkerSandboxService(ctx, { isolation: 'in-process', poolSize: 1, spinMs: 0.2 })
    expect((service.sandbox as WorkerSandbox).spinMs).to.equal(0.2)
    return service.sandbox.close()
  })
})
