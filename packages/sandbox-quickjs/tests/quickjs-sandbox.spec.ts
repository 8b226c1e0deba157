import { ProcessSandbox } from '@faber/sandbox'
import { describeHazards, describeHostile, describePool, hazardLimits } from '@faber/sandbox/testing'
import { expect } from 'chai'
import QuickJsSandboxService, { QuickJsSandbox, quickJsBackend } from '../src/index.ts'

// what QuickJS does not do as V8 does (README, "What QuickJS does not do as V8 does"), each checked below as QuickJS does it
const differences = ['reports an uncaught error with its position', 'shows a huge error message only by its length']

describeHazards('quickjs-wasm', () => new QuickJsSandbox({ poolSize: 2, limits: hazardLimits }), { skip: differences })
describeHazards('quickjs-wasm, process tier', () => new ProcessSandbox({ poolSize: 2, limits: hazardLimits, backend: quickJsBackend }), { skip: differences })
describePool('quickjs-wasm', (poolSize, maxConcurrent) => new QuickJsSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), QuickJsSandboxService)
// its memory limit holds in the host's process: the bombs run in process too
describeHostile('quickjs-wasm', { bombsIn: ['process', 'in-process'] })

describe('quickjs-wasm: what it does as QuickJS does', function () {
  this.timeout(20000)
  const sandbox = new QuickJsSandbox({ poolSize: 1, limits: { ...hazardLimits, cpuMs: 2000, wallMs: 5000 } })
  const call = async (name: string, json: string) =>
    name === 'fail' ? { ok: false as const, message: 'nope', code: 'E_X' } : { ok: true as const, value: json }
  const run = (code: string) => sandbox.run({ code, tools: ['echo', 'fail'], call, signal: new AbortController().signal })
  before(() => sandbox.ready())
  after(() => sandbox.close())

  it('places an error at the start of the expression that threw, where V8 names the property', async () => {
    // V8: line 3, column 8 (the `x`)
    expect(await run('const a = 1\n\n  null.x')).to.deep.include({ ok: false, kind: 'exception', line: 3, column: 3 })
  })

  it('keeps columns of the first line as the program wrote them', async () => {
    expect(await run('null.x')).to.deep.include({ ok: false, kind: 'exception', line: 1, column: 1 })
  })

  // it has no async stack traces; the site each call carries places it, as on V8
  it('locates a failed call where it was made, caught or uncaught, and names the tool and its code', async () => {
    const outcome = await run('const at = []\ntry { await tools.fail({}) } catch (e) { at.push(e.stack, e.code, e.toolName) }\nreturn at')
    expect(outcome).to.deep.include({ ok: true, result: '["ToolCallError: nope\\n    at program.js:2:19","E_X","fail"]' })
    const uncaught = await run('const a = 1\n  await tools.fail({})')
    expect(uncaught).to.deep.include({ ok: false, kind: 'exception', line: 2, column: 15 })
    if (!uncaught.ok) expect(uncaught.message).to.match(/^uncaught ToolCallError E_X from tools\.fail \(line 2, column 15\): nope/)
  })

  it('shows a huge error message only by its length, and still where it was thrown (its stack holds no message)', async () => {
    // V8: no position, its stack (which holds the message) being too long to search
    expect(await run('throw new Error("x".repeat(3e6))')).to.deep.include({
      ok: false,
      kind: 'exception',
      message: 'Error: (3000000 characters, too long to show) (line 1, column 21)',
    })
  })

  it('says what V8 says for a stack overflow, and runs 5,000 frames deep', async () => {
    expect(await run('const f = (n) => n === 0 ? 0 : 1 + f(n - 1); return f(5000)')).to.deep.include({ ok: true, result: '5000' })
    const overflow = await run('const f = (n) => n === 0 ? 0 : 1 + f(n - 1); return f(1e6)')
    expect(overflow).to.deep.include({ ok: false, kind: 'exception' })
    if (!overflow.ok) expect(overflow.message).to.match(/^RangeError: Maximum call stack size exceeded/)
  })

  it('reads the clock and random numbers a request recorded first, and records what it reads beyond them at its next call', async () => {
    const recorded: number[] = []
    const outcome = await sandbox.run({
      code: 'const read = [Date.now(), Math.random(), Date.now() > 1234]\nawait tools.echo({})\nreturn read',
      tools: ['echo'],
      call,
      signal: new AbortController().signal,
      values: { replay: [1234, 0.5], record: (values) => recorded.push(...values) },
    })
    expect(outcome).to.deep.include({ ok: true, result: '[1234,0.5,true]' })
    expect(recorded).to.have.length(1)
    expect(recorded[0]).to.be.above(1234)
  })

  it('keeps the host event loop free while a program spins', async () => {
    const spin = sandbox.run({ code: 'while (true) {}', tools: [], call, signal: new AbortController().signal, limits: { cpuMs: 1500 } })
    // timers keep firing while the program computes on its thread. a loop the program held would make the first timer
    // late by the whole 1500 ms; the bound leaves a loaded machine's own lateness (189 ms seen at load ~20) room
    let late = 0
    for (let i = 0; i < 20; i++) {
      const at = performance.now()
      await new Promise((resolve) => setTimeout(resolve, 5))
      late = Math.max(late, performance.now() - at - 5)
    }
    expect(await spin).to.deep.include({ ok: false, kind: 'timeout' })
    expect(late).to.be.below(750)
  })
})
