// the hand-off of nested calls on the isolate's own thread (the in-process tier): with spinning off, by default, and with
// a generous spinMs so that both sides spin on a loaded machine too. each case gives the same outcome every way
import type { BridgeReply, CodeRunLimits, CodeRunOutcome } from '@faber/sandbox'
import { hazardLimits } from '@faber/sandbox/testing'
import { expect } from 'chai'
import { Context } from 'cordis'
import IsolateSandboxService, { IsolateSandbox } from '../src/index.ts'

for (const spinMs of [0, undefined, 1])
  describe(`isolated-vm: hand-off (spinMs ${spinMs ?? 'by default'})`, function () {
    this.timeout(30000)
    let sandbox: IsolateSandbox
    let late = 0
    let settled = false
    let waiting: (() => void) | undefined
    let abort: (() => void) | undefined
    before(() => {
      sandbox = new IsolateSandbox({ poolSize: 1, limits: hazardLimits, spinMs })
    })
    after(() => sandbox.close())
    const call = async (name: string, json: string): Promise<BridgeReply> => {
      if (settled) late++
      if (name === 'never') {
        waiting?.()
        return new Promise(() => {})
      }
      // the run is aborted while this call is being answered: the isolate's thread spins for the reply meanwhile
      if (name === 'abort') abort?.()
      if (name === 'fail') return { ok: false, message: 'no', code: 'E_NO' }
      // a slow host: the answer comes from a later turn of the event loop, after a timer
      if (name === 'slow') await new Promise((resolve) => setTimeout(resolve, 2))
      // a busy host: the answer comes after a millisecond of this thread's work, while the isolate may spin for it
      if (name === 'busy') for (const until = performance.now() + 1; performance.now() < until; );
      return { ok: true, value: json }
    }
    const run = async (code: string, signal = new AbortController().signal, limits: Partial<CodeRunLimits> = {}) => {
      settled = false
      const outcome = await sandbox.run({
        code,
        tools: ['echo', 'never', 'fail', 'slow', 'busy', 'abort'],
        call,
        signal,
        limits: { ...hazardLimits, ...limits },
      })
      settled = true
      return outcome
    }
    const kind = (outcome: CodeRunOutcome) => (outcome.ok ? `ok ${outcome.result}` : outcome.kind)
    // for a run that should end well: the hazard limits are for those that should not (a loaded machine must not end
    // the first kind early: isolated-vm's cpuTime counts the time its thread was preempted too)
    const roomy = { cpuMs: 5000, wallMs: 10000 }

    it('answers sequential calls, calls under Promise.all, calls after other awaits and failed calls', async () => {
      const code = `let n = 0
for (let i = 0; i < 200; i++) n += (await tools.echo({ i })).i
const all = await Promise.all([1, 2, 3].map((i) => tools.echo({ i })))
await null
const later = await tools.echo({ later: 1 })
await new Promise((resolve) => resolve())
const mixed = await Promise.all([tools.echo({ m: 1 }), Promise.resolve(2), (async () => { await null; return (await tools.echo({ m: 3 })).m })()])
const pending = tools.echo({ p: 4 })
await null
await null
const p = (await pending).p
try { await tools.fail({}) } catch (e) { return [n, all.length, later.later, mixed[0].m, mixed[1], mixed[2], p, e.code] }`
      expect(await run(code, undefined, roomy)).to.deep.include({ ok: true, result: '[19900,3,1,1,2,3,4,"E_NO"]' })
    })

    it('keeps each call and reply whole and in order, whichever way it crosses (the ring, or the callback when it is too long)', async () => {
      // sizes around a ring message's limit (4096 code units) and past it, enough calls for the ring to wrap many times,
      // text outside ASCII, lone surrogates (escaped by JSON), and lines printed between the calls
      const code = `const sizes = [0, 1, 2, 99, 4000, 4060, 4070, 4071, 4072, 4073, 4086, 4100, 9000, 40000]
const seen = []
for (let i = 0; i < 140; i++) {
  const text = ('é☃😀\\ud800' + i).repeat(sizes[i % sizes.length])
  const back = await tools.echo({ i, text })
  if (back.i !== i || back.text !== text) return 'mismatch at ' + i
  if (i % 7 === 0) console.log(i)
  seen.push(back.i)
}
const all = await Promise.all(sizes.map((n, i) => tools.echo({ i, text: 'x'.repeat(n) })))
return seen.length + ' ' + all.map((r) => r.text.length).join()`
      const outcome = await run(code, undefined, { cpuMs: 10000, wallMs: 20000 })
      expect(outcome).to.deep.include({ ok: true, result: '"140 0,1,2,99,4000,4060,4070,4071,4072,4073,4086,4100,9000,40000"' })
      expect(outcome.logs).to.deep.equal(Array.from({ length: 20 }, (_, k) => String(7 * k)))
    })

    it('counts what it handed off: every call and every reply, through the ring or the other way, and the spins', async () => {
      // on a sandbox of its own that keeps no unit warm: the shared one refills its pool in the background as a run takes
      // its unit, and that unit's warm-up run (a call, its outcome, a reply) would count too when it lands meanwhile
      const shared = sandbox
      sandbox = new IsolateSandbox({ poolSize: 0, limits: hazardLimits, spinMs })
      try {
        const before = sandbox.handoffStats()
        expect(kind(await run('for (let i = 0; i < 100; i++) await tools.echo({ i })\nreturn 1', undefined, roomy))).to.equal('ok 1')
        const after = sandbox.handoffStats()
        const sent = (lane: 'calls' | 'replies') => after[lane].ring + after[lane].port - before[lane].ring - before[lane].port
        // the program's messages are the calls and its outcome; a reply each
        expect(sent('calls')).to.equal(101)
        expect(sent('replies')).to.equal(100)
        if (spinMs === 0) expect(after.calls.ring + after.replies.ring + after.calls.caught + after.replies.caught).to.equal(0)
      } finally {
        await sandbox.close()
        sandbox = shared
      }
    })

    it('stops a spin after a call (cpu), allocation after a call (memory) and a flood after a call (output)', async () => {
      expect(kind(await run('await tools.echo({})\nwhile (true) {}'))).to.equal('timeout')
      expect(kind(await run('for (let i = 0; i < 100; i++) await tools.echo({ i })\nwhile (true) {}'))).to.equal('timeout')
      expect(kind(await run('for (let i = 0; i < 100; i++) await tools.echo({ i })\nawait new Promise(() => {})', undefined, { wallMs: 300 }))).to.equal(
        'timeout',
      )
      const allocate = 'await tools.echo({})\nconst keep = []\nwhile (true) keep.push(new Array(1e5).fill(1.5))'
      expect(kind(await run(allocate, undefined, { cpuMs: 5000, wallMs: 5000 }))).to.equal('memory')
      expect(kind(await run('await tools.echo({})\nwhile (true) console.log("flood")'))).to.equal('output-limit')
      expect(kind(await run('return (await tools.echo({ a: 1 })).a', undefined, roomy))).to.equal('ok 1')
    })

    it('stops a program that computes right after a call it never awaits, while the host answers it (cpu)', async () => {
      expect(kind(await run('tools.echo({})\nwhile (true) {}'))).to.equal('timeout')
      expect(kind(await run('const p = tools.echo({ a: 2 })\nfor (let i = 0; i < 1e6; i++) {}\nreturn (await p).a', undefined, roomy))).to.equal('ok 2')
    })

    it('answers a slow host within a cpu budget smaller than the waits', async () => {
      // 60 answers that each come after a 2 ms timer: at least 120 ms of waiting against a cpu budget of 100 ms. the
      // isolate's spins count as its cpu, but a spin that misses makes the next ones sleep (README)
      const code = 'let n = 0\nfor (let i = 0; i < 60; i++) n += (await tools.slow({ i })).i\nreturn n'
      expect(kind(await run(code, undefined, { cpuMs: 100, wallMs: 10000 }))).to.equal('ok 1770')
      expect(kind(await run('return (await tools.echo({ a: 3 })).a', undefined, roomy))).to.equal('ok 3')
    })

    it('answers a busy host within a cpu budget smaller than the time the isolate spent spinning for it', async () => {
      // 200 answers that each take the host's thread a millisecond: the isolate spins for them (or sleeps), and neither
      // is the program's cpu
      const code = 'let n = 0\nfor (let i = 0; i < 200; i++) n += (await tools.busy({ i })).i\nreturn n'
      expect(kind(await run(code, undefined, { cpuMs: 150, wallMs: 20000 }))).to.equal('ok 19900')
    })

    it('answers thousands of calls waiting at once, run after run', async () => {
      const code =
        'let n = 0\nfor (let round = 0; round < 3; round++) for (const r of await Promise.all(Array.from({ length: 1000 }, (_, i) => tools.echo({ i })))) n += r.i\nreturn n'
      for (let i = 0; i < 2; i++) expect(kind(await run(code, undefined, { cpuMs: 5000, wallMs: 10000 }))).to.equal('ok 1498500')
    })

    it('ends a run that waits on the host when aborted, and one aborted while its call is answered; serves the next', async () => {
      const controller = new AbortController()
      const asked = new Promise<void>((resolve) => (waiting = resolve))
      const outcome = run('await tools.echo({})\nawait tools.never({})', controller.signal)
      // aborted once the run waits on the host's answer to never
      await asked
      controller.abort()
      expect(kind(await outcome)).to.equal('abort')
      const during = new AbortController()
      abort = () => during.abort()
      try {
        expect(kind(await run('for (let i = 0; i < 50; i++) await tools.echo({ i })\nawait tools.abort({})\nreturn 1', during.signal))).to.equal('abort')
      } finally {
        abort = undefined
      }
      expect(kind(await run('return (await tools.echo({ a: 1 })).a', undefined, roomy))).to.equal('ok 1')
      expect(late).to.equal(0)
    })

    it('goes on calling right when the program replaced the intrinsics the hand-off uses, and the next run is whole', async () => {
      // the driver captured what it uses before the program ran: these change nothing of its hand-off
      const tamper = `const { defineProperty } = Object
String.prototype.charCodeAt = () => 65
String.prototype.indexOf = () => -1
String.prototype.slice = () => '9'
String.fromCharCode = () => '{'
Atomics.load = () => 1
Atomics.store = () => 0
Atomics.add = () => 0
Atomics.sub = () => 0
Atomics.compareExchange = () => 0
Date.now = () => 0
defineProperty(Object.getPrototypeOf(Int32Array.prototype), 'length', { get: () => 1e9 })
defineProperty(Int32Array.prototype, 'constructor', { get: () => { throw new Error('species') } })
defineProperty(Array.prototype, '0', { set: () => { throw new Error('index') }, get: () => 7, configurable: true })
Array.prototype.push = () => { throw new Error('push') }
Function.prototype.call = () => 0
Function.prototype.apply = () => 0
Promise.prototype.then = function () { throw new Error('then') }
`
      const code = `${tamper}
let n = 0
for (let i = 0; i < 150; i++) n += (await tools.echo({ i, s: 'é😀' + 'x'.repeat(i * 40) })).i
return n`
      const outcome = await run(code, undefined, { cpuMs: 5000, wallMs: 10000 })
      // the prelude and the program may trip over what they replaced themselves; the hand-off may not, nor the host
      if (outcome.ok) expect(outcome.result).to.equal('11175')
      else expect(outcome.kind).to.equal('exception')
      expect(kind(await run('let n = 0\nfor (let i = 0; i < 50; i++) n += (await tools.echo({ i })).i\nreturn n', undefined, roomy))).to.equal('ok 1225')
    })
  })

describe('isolated-vm: the service config', () => {
  it('takes spinMs (0.05 by default, at most 1) and hands it to the sandbox; a misspelling names it', () => {
    expect(IsolateSandboxService.Config({}).spinMs).to.equal(0.05)
    expect(IsolateSandboxService.Config({ spinMs: 0 }).spinMs).to.equal(0)
    expect(() => IsolateSandboxService.Config({ spinMs: 2 })).to.throw()
    expect(() => IsolateSandboxService.Config({ spinMS: 0.1 } as never)).to.throw(/spinMs/)
    const ctx = new Context()
    const service = new IsolateSandboxService(ctx, { isolation: 'in-process', poolSize: 1, spinMs: 0.2 })
    expect((service.sandbox as IsolateSandbox).spinMs).to.equal(0.2)
    return service.sandbox.close()
  })
})
