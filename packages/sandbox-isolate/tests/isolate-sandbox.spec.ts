import { ProcessSandbox } from '@faber/sandbox'
import { describeHazards, describeHostile, describePool, hazardLimits } from '@faber/sandbox/testing'
import { expect } from 'chai'
import IsolateSandboxService, { IsolateSandbox, isolateBackend } from '../src/index.ts'

describeHazards('isolated-vm', () => new IsolateSandbox({ poolSize: 2, limits: hazardLimits }))
describeHazards(
  'isolated-vm, process tier',
  () =>
    new ProcessSandbox({
      poolSize: 2,
      limits: hazardLimits,
      backend: isolateBackend,
    }),
)
describePool('isolated-vm', (poolSize, maxConcurrent) => new IsolateSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), IsolateSandboxService)
describeHostile('isolated-vm')

// a program runs on the isolate's own thread throughout; its calls and replies cross by callback, post or the hand-off
describe("isolated-vm: driving a program on the isolate's thread", () => {
  const echo = async (_: string, json: string) => ({ ok: true as const, value: json })

  it('calls the tool named, past the 65 536th of a run', async () => {
    // binding 65 540 names takes real CPU time: a roomy budget, so a loaded machine does not end the run first
    const sandbox = new IsolateSandbox({ poolSize: 1, limits: { ...hazardLimits, cpuMs: 20000, wallMs: 20000 } })
    const tools = Array.from({ length: 65540 }, (_, i) => `t${i}`)
    const called: string[] = []
    const call = async (name: string) => {
      called.push(name)
      return { ok: true as const, value: JSON.stringify(name) }
    }
    try {
      const code = 'await tools.t1({})\nreturn [await tools.t65536({}), await tools.t65539({}), await tools.t2({})]'
      const outcome = await sandbox.run({ code, tools, call, signal: new AbortController().signal })
      expect(outcome).to.deep.include({ ok: true, result: '["t65536","t65539","t2"]' })
      expect(called).to.deep.equal(['t1', 't65536', 't65539', 't2'])
    } finally {
      await sandbox.close()
    }
  })

  it("lets the host's event loop turn while a program's calls are answered at once", async () => {
    const sandbox = new IsolateSandbox({ poolSize: 1, limits: { ...hazardLimits, cpuMs: 20000, wallMs: 20000 } })
    let turned: boolean | undefined
    const call = async () => {
      if (turned === undefined) {
        turned = false
        setImmediate(() => {
          turned = true
        })
      }
      return { ok: true as const, value: JSON.stringify(turned) }
    }
    try {
      // without a turn this spins until wallMs
      const outcome = await sandbox.run({
        code: 'let calls = 0\nwhile (!(await tools.turned())) calls++\nreturn calls > 0',
        tools: ['turned'],
        call,
        signal: new AbortController().signal,
      })
      expect(outcome).to.deep.include({ ok: true, result: 'true' })
    } finally {
      await sandbox.close()
    }
  })

  it('ends a program that spins after many calls at its cpu budget, twice in a row, and serves the next run', async () => {
    const sandbox = new IsolateSandbox({ poolSize: 1, limits: { ...hazardLimits, cpuMs: 300, wallMs: 10000 } })
    const run = (code: string) => sandbox.run({ code, tools: ['echo'], call: echo, signal: new AbortController().signal })
    try {
      for (let i = 0; i < 2; i++) {
        const spun = await run('for (let i = 0; i < 200; i++) await tools.echo({ i })\nwhile (true) {}')
        expect(spun).to.deep.include({ ok: false, kind: 'timeout' })
        expect(!spun.ok && spun.message).to.match(/CPU time/)
      }
      expect(await run('for (let i = 0; i < 200; i++) await tools.echo({ i })\nreturn 1')).to.deep.include({ ok: true, result: '1' })
    } finally {
      await sandbox.close()
    }
  })

  // that a program overflowing its stack as it enters the driver's realm (one per isolate, in a context of its own)
  // catches only errors of its own realm is a hazard of every backend: describeHazards' escapes, run above

  it('hands every call to the host in order, long arguments and short ones', async () => {
    const sandbox = new IsolateSandbox({ poolSize: 1, limits: { ...hazardLimits, cpuMs: 5000, wallMs: 10000 } })
    const seen: string[] = []
    const call = async (name: string, json: string) => {
      seen.push(`${name}:${json.length}`)
      return echo(name, json)
    }
    try {
      // one long argument, then ten more (40k units in all), then many small ones
      const sizes = [1, 5000, 2, 20, 3, ...Array.from({ length: 10 }, () => 4000)]
      const code = `
        await tools.echo({})
        const sizes = ${JSON.stringify(sizes)}
        const replies = await Promise.all([...sizes.map((n) => tools.echo({ text: 'y'.repeat(n) })), ...Array.from({ length: 900 }, (_, i) => tools['a-b']({ i }))])
        return [(await tools.echo({ text: 'x'.repeat(5000) })).text.length, replies.length, replies[1].text.length, replies[914].i]`
      const outcome = await sandbox.run({ code, tools: ['echo', 'a-b'], call, signal: new AbortController().signal })
      expect(outcome).to.deep.include({ ok: true, result: '[5000,915,5000,899]' })
      const expected = ['echo:2', ...sizes.map((n) => `echo:${n + 11}`), ...Array.from({ length: 900 }, (_, i) => `a-b:${`{"i":${i}}`.length}`), 'echo:5011']
      expect(seen).to.deep.equal(expected)
    } finally {
      await sandbox.close()
    }
  })
})
