import { expect } from 'chai'
import WorkerSandboxService, { type BridgeReply, type CodeRunLimits, type CodeRunOutcome, WorkerSandbox } from '../src/index.ts'
import { describeHazards, describeHostile, describePool, hazardLimits } from '../src/testing/index.ts'

describeHazards('worker-vm', () => new WorkerSandbox({ poolSize: 2, limits: hazardLimits }))
describePool('worker-vm', (poolSize, maxConcurrent) => new WorkerSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), WorkerSandboxService)
describeHostile('worker-vm')

// the spinning hand-off (on by default), with a generous spinMs so that both sides spin on a loaded machine too: the
// hazards that involve a nested call, where the spin happens
describe('worker-vm: spinning hand-off', function () {
  this.timeout(20000)
  let sandbox: WorkerSandbox
  let late = 0
  let settled = false
  let waiting: (() => void) | undefined
  before(() => {
    sandbox = new WorkerSandbox({ poolSize: 1, limits: hazardLimits, spinMs: 1 })
  })
  after(() => sandbox.close())
  const call = async (name: string, json: string): Promise<BridgeReply> => {
    if (settled) late++
    if (name === 'never') {
      waiting?.()
      return new Promise(() => {})
    }
    if (name === 'fail') return { ok: false, message: 'no', code: 'E_NO' }
    return { ok: true, value: json }
  }
  const run = async (code: string, signal = new AbortController().signal, limits: Partial<CodeRunLimits> = {}) => {
    settled = false
    const outcome = await sandbox.run({ code, tools: ['echo', 'never', 'fail'], call, signal, limits: { ...hazardLimits, ...limits } })
    settled = true
    return outcome
  }
  const kind = (outcome: CodeRunOutcome) => (outcome.ok ? `ok ${outcome.result}` : outcome.kind)

  it('answers sequential calls, calls under Promise.all and failed calls', async () => {
    const code =
      'let n = 0\nfor (let i = 0; i < 200; i++) n += (await tools.echo({ i })).i\nconst all = await Promise.all([1, 2, 3].map((i) => tools.echo({ i })))\n' +
      'try { await tools.fail({}) } catch (e) { return [n, all.length, e.code] }'
    expect(await run(code)).to.deep.include({ ok: true, result: '[19900,3,"E_NO"]' })
  })

  it('stops a spin after a call (cpu), allocation after a call (memory) and a flood after a call (output)', async () => {
    expect(kind(await run('await tools.echo({})\nwhile (true) {}'))).to.equal('timeout')
    const allocate = 'await tools.echo({})\nconst keep = []\nwhile (true) keep.push(new Array(1e5).fill(1.5))'
    expect(kind(await run(allocate, undefined, { cpuMs: 5000, wallMs: 5000 }))).to.equal('memory')
    expect(kind(await run('await tools.echo({})\nwhile (true) console.log("flood")'))).to.equal('output-limit')
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
