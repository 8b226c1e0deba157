import { defineTool, t } from '@faber/core'
import { callId, deployment, signal } from '@faber/core/testing'
import { expect } from 'chai'
import { mountCalls } from './helpers.ts'

describe('run_code type-checking (typecheck: true)', () => {
  async function setup() {
    const ctx = await deployment({ mode: 'code', typecheck: true })
    ctx.tools.register(
      defineTool({
        name: 'read',
        description: 'reads a file',
        parameters: t.object({ path: t.string(), limit: t.integer().optional() }),
        output: { schema: t.object({ text: t.string(), lines: t.integer() }) },
        execute: ({ path }) => ({ text: path, lines: 1 }),
      }),
    )
    const code = mountCalls(ctx, [])
    return { ctx, code }
  }

  const run = (ctx: Awaited<ReturnType<typeof setup>>['ctx'], source: string) =>
    ctx.tools.execute({ callId: callId(), name: 'run_code', arguments: { code: source, description: 'checked' }, signal: signal() })

  it('returns diagnostics with program positions instead of running', async () => {
    const { ctx, code } = await setup()
    const result = await run(ctx, 'const file = await tools.read({ pth: "a.txt" })\nreturn file.txt')
    expect(result.isError && result.error).to.deep.include({ code: 'CODE_RUN_FAILED', kind: 'typecheck' })
    expect(result.content).to.contain("line 1, column 33: Object literal may only specify known properties, but 'pth' does not exist in type")
    expect(result.content).to.contain("line 2, column 13: Property 'txt' does not exist on type")
    expect(code.requests).to.have.length(0)
  })

  it('runs a program that checks', async () => {
    const { ctx, code } = await setup()
    const result = await run(ctx, 'const file = await tools.read({ path: "a.txt" })\nconsole.log(file.lines + 1)\nreturn file.text.toUpperCase()')
    expect(result.isError, result.content).to.equal(false)
    expect(code.requests).to.have.length(1)
  })
})
