// the hand-off suite: what a backend whose nested calls hand off with a spin must keep, whatever spinMs is. each such
// backend's spec calls `describeHandoff` once and keeps the cases only it has (how its spin is scheduled, what it captures)
import { expect } from 'chai'
import { Context } from 'cordis'
import { after, before, describe, it } from 'mocha'
import type { LaneCounts } from '../lane.mjs'
import type { Pool, SandboxService } from '../service.ts'
import type { BridgeReply, CodeRunLimits, CodeRunOutcome } from '../types.ts'
import { hazardLimits, request, roomy } from './hazards.ts'

export interface HandoffRuntime extends Pool {
  readonly spinMs: number
  handoffStats(): { calls: LaneCounts; replies: LaneCounts }
}

/** what a backend's own hand-off cases (`more`) are given: the suite's way to run a program, and to read its outcome */
export interface HandoffHost {
  /** runs `code` on the suite's sandbox with the hazard limits, `limits` over them */
  run(code: string, signal?: AbortSignal, limits?: Partial<CodeRunLimits>): Promise<CodeRunOutcome>
  /** `ok <result>` or the failure's kind */
  kind(outcome: CodeRunOutcome): string
  /** budgets for a run that should end well: a loaded machine must not end it early */
  roomy: Partial<CodeRunLimits>
}

type ServiceClass = (new (ctx: Context, config: Record<string, unknown>) => SandboxService) & { Config(config: unknown): { spinMs?: number } }

/**
 * the hand-off's cases on `make`'s sandbox, once per spinMs of `spins` (undefined: the default). `more` adds a backend's
 * own cases to each spinMs's suite, with the same host
 */
export function describeHandoff(
  label: string,
  make: (options: { poolSize: number; spinMs?: number }) => HandoffRuntime,
  Service: ServiceClass,
  spins: (number | undefined)[],
  more?: (host: HandoffHost, spinMs: number | undefined) => void,
) {
  for (const spinMs of spins)
    describe(`${label}: hand-off (spinMs ${spinMs ?? 'by default'})`, function () {
      this.timeout(30000)
      let sandbox: HandoffRuntime
      let late = 0
      let settled = false
      let waiting: (() => void) | undefined
      let abort: (() => void) | undefined
      before(() => {
        sandbox = make({ poolSize: 1, spinMs })
      })
      after(() => sandbox.close())
      const call = async (name: string, json: string): Promise<BridgeReply> => {
        if (settled) late++
        if (name === 'never') {
          waiting?.()
          return new Promise(() => {})
        }
        // the run is aborted while this call is being answered: the sandbox's side may spin for the reply meanwhile
        if (name === 'abort') abort?.()
        if (name === 'fail') return { ok: false, message: 'no', code: 'E_NO' }
        // a slow host: the answer comes from a later turn of the event loop, after a timer
        if (name === 'slow') await new Promise((resolve) => setTimeout(resolve, 10))
        // a busy host: the answer comes after a millisecond of this thread's work, while the sandbox may spin for it
        if (name === 'busy') for (const until = performance.now() + 1; performance.now() < until; );
        return { ok: true, value: json }
      }
      const run = async (code: string, signal = new AbortController().signal, limits: Partial<CodeRunLimits> = {}) => {
        settled = false
        const outcome = await sandbox.run(
          request(code, { tools: ['echo', 'never', 'fail', 'slow', 'busy', 'abort'], call, signal, limits: { ...hazardLimits, ...limits } }),
        )
        settled = true
        return outcome
      }
      const kind = (outcome: CodeRunOutcome) => (outcome.ok ? `ok ${outcome.result}` : outcome.kind)

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

      it('keeps each call and reply whole and in order, whichever way it crosses (the ring, or the other way when it is too long)', async () => {
        // sizes around a ring message's limit (4096 code units, less what frames a call) and past it, enough calls for
        // the ring to wrap many times, text outside ASCII, lone surrogates (escaped by JSON), and lines printed between
        const sizes = [0, 1, 2, 99, 4000, 4060, 4070, 4071, 4072, 4073, 4086, 4087, 4088, 4089, 4100, 9000, 40000]
        const calls = 10 * sizes.length
        const code = `const sizes = ${JSON.stringify(sizes)}
const seen = []
for (let i = 0; i < ${calls}; i++) {
  const text = ('é☃😀\\ud800' + i).repeat(sizes[i % sizes.length])
  const back = await tools.echo({ i, text })
  if (back.i !== i || back.text !== text) return 'mismatch at ' + i
  if (i % 7 === 0) console.log(i)
  seen.push(back.i)
}
const all = await Promise.all(sizes.map((n, i) => tools.echo({ i, text: 'x'.repeat(n) })))
return seen.length + ' ' + all.map((r) => r.text.length).join()`
        const outcome = await run(code, undefined, { cpuMs: 10000, wallMs: 30000 })
        expect(outcome).to.deep.include({ ok: true, result: JSON.stringify(`${calls} ${sizes.join()}`) })
        expect(outcome.logs).to.deep.equal(Array.from({ length: Math.ceil(calls / 7) }, (_, k) => String(7 * k)))
      })

      it('counts what it handed off: every call and every reply, through the ring or the other way, and the spins', async () => {
        // on a sandbox of its own that keeps no unit warm: the shared one refills its pool in the background as a run
        // takes its unit, and that unit's warm-up run (a call, its outcome, a reply) would count too when it lands meanwhile
        const shared = sandbox
        sandbox = make({ poolSize: 0, spinMs })
        try {
          const before = sandbox.handoffStats()
          expect(kind(await run('for (let i = 0; i < 100; i++) await tools.echo({ i })\nreturn 1', undefined, roomy))).to.equal('ok 1')
          const after = sandbox.handoffStats()
          const sent = (lane: 'calls' | 'replies') => after[lane].ring + after[lane].port - before[lane].ring - before[lane].port
          // the program's messages are the calls and its outcome; a reply each
          expect(sent('calls')).to.equal(101)
          expect(sent('replies')).to.equal(100)
          for (const lane of ['calls', 'replies'] as const)
            expect(after[lane].caught + after[lane].missed).to.be.at.least(before[lane].caught + before[lane].missed)
          if (spinMs === 0) expect(after.calls.ring + after.replies.ring + after.calls.caught + after.replies.caught).to.equal(0)
        } finally {
          await sandbox.close()
          sandbox = shared
        }
      })

      it('stops a spin after a call (cpu), allocation after a call (memory) and a flood after a call (output)', async () => {
        expect(kind(await run('await tools.echo({})\nwhile (true) {}'))).to.equal('timeout')
        expect(kind(await run('for (let i = 0; i < 100; i++) await tools.echo({ i })\nwhile (true) {}'))).to.equal('timeout')
        const stuck = 'for (let i = 0; i < 100; i++) await tools.echo({ i })\nawait new Promise(() => {})'
        expect(kind(await run(stuck, undefined, { wallMs: 300 }))).to.equal('timeout')
        const allocate = 'await tools.echo({})\nconst keep = []\nwhile (true) keep.push(new Array(1e5).fill(1.5))'
        expect(kind(await run(allocate, undefined, { cpuMs: 5000, wallMs: 5000 }))).to.equal('memory')
        expect(kind(await run('await tools.echo({})\nwhile (true) console.log("flood")'))).to.equal('output-limit')
        expect(kind(await run('return (await tools.echo({ a: 1 })).a', undefined, roomy))).to.equal('ok 1')
      })

      it('stops a program that computes right after a call it never awaits, while the host answers it (cpu)', async () => {
        expect(kind(await run('tools.echo({})\nwhile (true) {}'))).to.equal('timeout')
        expect(kind(await run('const p = tools.echo({ a: 2 })\nfor (let i = 0; i < 1e6; i++) {}\nreturn (await p).a', undefined, roomy))).to.equal('ok 2')
      })

      it('answers a slow host, and the waits are not the program’s cpu', async () => {
        // 60 answers that each come after a 10 ms timer: at least 600 ms of waiting against a cpu budget of 300 ms, which
        // leaves a loaded machine room for the program's own time (a sandbox's cpu may count waiting for a core)
        const code = 'let n = 0\nfor (let i = 0; i < 60; i++) n += (await tools.slow({ i })).i\nreturn n'
        expect(kind(await run(code, undefined, { cpuMs: 300, wallMs: 20000 }))).to.equal('ok 1770')
        expect(kind(await run('return (await tools.echo({ a: 3 })).a', undefined, roomy))).to.equal('ok 3')
      })

      it('answers thousands of calls waiting at once, run after run', async () => {
        const code =
          'let n = 0\nfor (let round = 0; round < 3; round++) for (const r of await Promise.all(Array.from({ length: 1000 }, (_, i) => tools.echo({ i })))) n += r.i\nreturn n'
        for (let i = 0; i < 2; i++) expect(kind(await run(code, undefined, { cpuMs: 5000, wallMs: 10000 }))).to.equal('ok 1498500')
      })

      it('ends a run that waits on the host when aborted, and one aborted while its call is answered; serves the next', async () => {
        const controller = new AbortController()
        const asked = new Promise<void>((resolve) => (waiting = resolve))
        // roomy limits: a loaded machine must not end either run on its clock before the abort it is about
        const outcome = run('await tools.echo({})\nawait tools.never({})', controller.signal, roomy)
        // aborted once the run waits on the host's answer to never
        await asked
        controller.abort()
        expect(kind(await outcome)).to.equal('abort')
        const during = new AbortController()
        abort = () => during.abort()
        try {
          const code = 'for (let i = 0; i < 50; i++) await tools.echo({ i })\nawait tools.abort({})\nreturn 1'
          expect(kind(await run(code, during.signal, roomy))).to.equal('abort')
        } finally {
          abort = undefined
        }
        expect(kind(await run('return (await tools.echo({ a: 1 })).a', undefined, roomy))).to.equal('ok 1')
        expect(late).to.equal(0)
      })

      more?.({ run, kind, roomy }, spinMs)
    })

  describe(`${label}: the service config`, () => {
    it('takes spinMs (0.05 by default, at most 1) and hands it to the sandbox; a misspelling names it', () => {
      expect(Service.Config({}).spinMs).to.equal(0.05)
      expect(Service.Config({ spinMs: 0 }).spinMs).to.equal(0)
      expect(() => Service.Config({ spinMs: 2 })).to.throw()
      expect(() => Service.Config({ spinMS: 0.1 })).to.throw(/spinMs/)
      const service = new Service(new Context(), { isolation: 'in-process', poolSize: 1, spinMs: 0.2 })
      expect((service.sandbox as unknown as HandoffRuntime).spinMs).to.equal(0.2)
      return (service.sandbox as unknown as HandoffRuntime).close()
    })
  })
}
