import { describeHazards, describeHostile, describePool, hazardLimits } from '@faber/sandbox/testing'
import { expect } from 'chai'
import IsolateSandboxService, { IsolateSandbox } from '../src/index.ts'

describeHazards('isolated-vm', () => new IsolateSandbox({ poolSize: 2, limits: hazardLimits }))
describePool('isolated-vm', (poolSize, maxConcurrent) => new IsolateSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), IsolateSandboxService)
describeHostile('isolated-vm')

describe('isolated-vm: sliceMs', () => {
  it('ends a program that computes longer than sliceMs at once after a tool call, and serves the next run', async () => {
    const sandbox = new IsolateSandbox({ poolSize: 1, sliceMs: 50, limits: { ...hazardLimits, cpuMs: 5000, wallMs: 10000 } })
    const call = async (_: string, json: string) => ({ ok: true as const, value: json })
    const run = (code: string) => sandbox.run({ code, tools: ['echo'], call, signal: new AbortController().signal })
    try {
      const spun = await run('await tools.echo({})\nwhile (true) {}')
      if (spun.ok) expect.fail('the spin ran to completion')
      expect(spun.kind).to.equal('timeout')
      expect(spun.message).to.match(/sliceMs/)
      const next = await run('return [await tools.echo({ a: 1 }), await tools.echo({ b: 2 })]')
      expect(next).to.deep.include({ ok: true, result: '[{"a":1},{"b":2}]' })
    } finally {
      await sandbox.close()
    }
  })
})
