import { describeHazards, hazardLimits } from '@faber/sandbox/hazards'
import { expect } from 'chai'
import { Context } from 'cordis'
import IsolateSandboxService, { IsolateSandbox } from '../src/index.ts'

describeHazards('isolated-vm', () => new IsolateSandbox({ poolSize: 2, limits: hazardLimits }))

describe('isolated-vm: pool', () => {
  it('serves overlapping runs beyond the pool size', async () => {
    const sandbox = new IsolateSandbox({ poolSize: 1, limits: hazardLimits })
    try {
      const signal = new AbortController().signal
      const call = async (_: string, json: string) => ({ ok: true as const, value: json })
      const runs = [1, 2, 3].map((n) => sandbox.run({ code: `return await tools.echo(${n})`, tools: ['echo'], call, signal, limits: hazardLimits }))
      expect((await Promise.all(runs)).map((outcome) => outcome.ok && outcome.result)).to.deep.equal(['1', '2', '3'])
    } finally {
      await sandbox.close()
    }
  })

  it('ends runs in progress on close', async () => {
    const sandbox = new IsolateSandbox({ poolSize: 1, limits: hazardLimits })
    const outcome = sandbox.run({
      code: 'await tools.wait({})',
      tools: ['wait'],
      call: () => new Promise(() => {}),
      signal: new AbortController().signal,
      limits: hazardLimits,
    })
    await new Promise((resolve) => setTimeout(resolve, 20))
    await sandbox.close()
    expect(await outcome).to.include({ ok: false, kind: 'abort' })
  })
})

describe('isolated-vm: plugin', () => {
  it('provides ctx.codeRuntime and disposes its isolates on dispose', async () => {
    const ctx = new Context()
    const fork = ctx.plugin(IsolateSandboxService, { poolSize: 1, limits: { memoryMb: 32 } })
    await ctx.start()
    expect(ctx.codeRuntime.backend).to.equal('isolated-vm')
    const outcome = await ctx.codeRuntime.run({
      code: 'return 40 + 2',
      tools: [],
      call: async () => ({ ok: false, message: 'none' }),
      signal: new AbortController().signal,
      limits: hazardLimits,
    })
    expect(outcome).to.deep.equal({ ok: true, logs: [], result: '42' })
    fork.dispose()
    expect(ctx.get('codeRuntime')).to.equal(undefined)
  })
})
