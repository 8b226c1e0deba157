// a program that fires 100,000 nested calls at once (they cross the thread together, fc58e79) and then throws, runs
// out of memory, returns, or is aborted, on the default sandbox (worker backend, process tier): it ends as that, the
// calls still running are aborted, no body starts once run_code returned, the model is told of the cut-off calls in a
// few lines, and the next program on the same unit gets only its own replies

import { defineTool, type Json, type ToolResult, t } from '@faber/core'
import { call, deployment, disposeAll, value } from '@faber/core/testing'
import WorkerSandboxService from '@faber/sandbox'
import { expect } from 'chai'

const FIRE = 'for (let i = 0; i < 100000; i++) tools.slow({ i }).catch(() => {})'

describe('a program that fires 100,000 calls and then fails (default sandbox)', function () {
  this.timeout(60_000)
  let ended = false
  let startedAfter = 0
  afterEach(() => disposeAll())

  async function deploy() {
    const ctx = await deployment({ mode: 'code' }, (ctx) => ctx.plugin(WorkerSandboxService, { poolSize: 1, maxConcurrent: 1 }))
    ctx.tools.register(
      defineTool({
        name: 'slow',
        description: 'takes 20 ms',
        parameters: t.object({ i: t.number() }),
        output: { schema: t.unknown() },
        isConcurrencySafe: () => true,
        execute: async ({ i }, { signal }): Promise<Json> => {
          if (ended) startedAfter++
          await new Promise((resolve) => {
            const timer = setTimeout(resolve, 20)
            signal.addEventListener('abort', () => resolve(clearTimeout(timer)))
          })
          return i
        },
      }),
    )
    return ctx
  }

  /** runs `code`, then (once run_code returned) another program on the same unit */
  async function runThenNext(code: string, signal?: AbortSignal): Promise<ToolResult> {
    const ctx = await deploy()
    ended = false
    startedAfter = 0
    const result = await call(ctx, 'run_code', { code, description: 'fans out' }, { signal })
    ended = true
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(startedAfter, 'bodies started after run_code returned').to.equal(0)
    ended = false
    const next = await call(ctx, 'run_code', { code: 'return await Promise.all([1, 2, 3].map((i) => tools.slow({ i })))', description: 'next' })
    expect(next.content, 'the next program gets its own replies').to.equal('[1,2,3]')
    return result
  }

  const failed = (result: ToolResult) => {
    if (!result.isError) throw new Error(`expected a failure, got ${result.content}`)
    return result.error as { kind?: string; message: string }
  }

  it('throws: an exception, the calls running cancelled and named in a few lines', async () => {
    const error = failed(await runThenNext(`${FIRE}\nthrow new Error('boom')`))
    expect(error.kind).to.equal('exception')
    expect(error.message).to.match(
      /^run_code failed \(exception\): Error: boom \(line 2, column 7\) \(\d+ calls still running were cancelled: (tools\.slow\(\{"i":\d+\}\), ){9}tools\.slow\(\{"i":\d+\}\) and \d+ more\)$/,
    )
    expect(error.message.length).to.be.below(600)
  })

  it('returns first: the note on the calls cut off stays a few lines, the output keeps each of them', async () => {
    const result = await runThenNext(`${FIRE}\nreturn 'early'`)
    expect(result.isError).to.equal(false)
    expect(result.content).to.match(
      /^early\n\(\d+ calls were cancelled because the program returned first: .* and \d+ more; await every call before returning\)$/,
    )
    expect(result.content.length).to.be.below(600)
    const { cancelled } = value<{ cancelled: string[] }>(result)
    expect(cancelled.length).to.be.above(10)
    expect(result.content).to.contain(`and ${cancelled.length - 10} more`)
  })

  it('runs out of memory: memory', async () => {
    expect(failed(await runThenNext(`${FIRE}\nconst a = []\nfor (;;) a.push(new Array(1e5).fill(1))`)).kind).to.equal('memory')
  })

  it('is aborted: abort', async () => {
    const abort = new AbortController()
    setTimeout(() => abort.abort(), 300)
    const code = 'const all = []\nfor (let i = 0; i < 100000; i++) all.push(tools.slow({ i }))\nreturn (await Promise.all(all)).length'
    expect(failed(await runThenNext(code, abort.signal)).kind).to.equal('abort')
  })
})
