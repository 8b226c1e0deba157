// what a run_code program is told when it goes wrong, on both sandbox backends: they share one prelude and must
// say the same thing.

import ToolRuntime, { defineTool, type ToolResult, t } from '@faber/core'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import { expect } from 'chai'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0

const backends = { worker: WorkerSandboxService, isolate: IsolateSandboxService }

async function deploy(backend: keyof typeof backends) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'code' })
  ctx.plugin(backends[backend], { poolSize: 1, limits: { cpuMs: 1000, wallMs: 5000 } })
  await ctx.start()
  ctx.tools.register(
    defineTool({
      name: 'read',
      description: 'Read a file. Returns its text.',
      parameters: t.object({ path: t.string() }),
      output: { schema: t.object({ text: t.string() }) },
      execute: ({ path }) => ({ text: `contents of ${path}` }),
    }),
  )
  ctx.tools.register(
    defineTool({
      name: 'write',
      description: 'Write a file.',
      parameters: t.object({ path: t.string(), content: t.string() }),
      output: { schema: t.boolean() },
      execute: () => true,
    }),
  )
  ctx.tools.guard((exec) => (exec.name === 'write' ? 'writing is off in this test' : undefined))
  return ctx
}

let ids = 0
function runCode(ctx: Context, code: string) {
  return ctx.tools.execute({ callId: `p${++ids}`, name: 'run_code', arguments: { code, description: 'test' }, signal: new AbortController().signal })
}

function failed(result: ToolResult) {
  expect(result.isError, result.content).to.equal(true)
  return result.isError ? result.error : (undefined as never)
}

for (const backend of ['worker', 'isolate'] as const) {
  describe(`program errors (${backend} sandbox)`, function () {
    this.timeout(10000)
    let ctx: Context
    before(async () => {
      ctx = await deploy(backend)
    })
    after(() => ctx.stop())

    it('an uncaught ToolCallError names the call, its line and column, and the code', async () => {
      const error = failed(await runCode(ctx, "const a = await tools.read({ path: 'a' })\n\n  await tools.write({ path: 'b', content: a.text })"))
      expect(error).to.include({ code: 'CODE_RUN_FAILED', kind: 'exception', line: 3, column: 15 })
      expect(error.message).to.match(/uncaught ToolCallError DENIED from tools\.write \(line 3, column 15\): .*writing is off/)
      expect(error.message).to.include('catch it with try/catch')
    })

    it("a caught ToolCallError's stack points at the call", async () => {
      const result = await runCode(
        ctx,
        "try {\n  await tools.write({ path: 'b', content: '' })\n} catch (e) {\n  return [e.code, e.stack.split('\\n')[1].trim()]\n}",
      )
      expect(result.isError, result.content).to.equal(false)
      expect(!result.isError && result.value).to.deep.include({ result: ['DENIED', 'at program.js:2:15'] })
    })

    it('a call of a missing tool names the nearest tools', async () => {
      const error = failed(await runCode(ctx, "return await tools.reed({ path: 'a' })"))
      expect(error.message).to.include('`tools.reed` is not a tool; did you mean `tools.read`?')
      expect(error).to.include({ line: 1, column: 20 })
    })
  })
}
