// what a run_code program is told when it goes wrong, on both sandbox backends: they share one prelude and must
// say the same thing.

import { ABSENT_GLOBALS, type Agent, createAgent, defineTool, PROGRAM_GLOBALS, RESULT_CHARS, SDK_SECTION, type ToolResult, t } from '@faber/core'
import { call, deployment, disposeAll } from '@faber/core/testing'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'

Logger.levels.base = 0

const backends = { worker: WorkerSandboxService, isolate: IsolateSandboxService }

async function deploy(backend: keyof typeof backends) {
  const ctx = await deployment({ mode: 'code' }, (ctx) => ctx.plugin(backends[backend], { poolSize: 1, limits: { cpuMs: 1000, wallMs: 5000 } }))
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
  ctx.tools.register(
    defineTool({
      name: 'slow',
      description: 'Wait until aborted.',
      parameters: t.object({ ms: t.integer() }),
      output: { schema: t.null() },
      isConcurrencySafe: () => true,
      execute: (_, run) => new Promise<null>((resolve) => run.signal.addEventListener('abort', () => resolve(null))),
    }),
  )
  ctx.tools.register(
    defineTool({
      name: 'issue_create',
      description: 'Open an issue in the tracker. Returns its number.',
      parameters: t.object({ title: t.string() }),
      output: { schema: t.object({ number: t.integer() }) },
      execute: () => ({ number: 7 }),
    }),
  )
  ctx.tools.guard((exec) => (exec.name === 'write' ? 'writing is off in this test' : undefined))
  return ctx
}

function runCode(ctx: Context, code: string, agent?: Agent) {
  return call(ctx, 'run_code', { code, description: 'test' }, { agent })
}

function succeeded(result: ToolResult) {
  expect(result.isError, result.content).to.equal(false)
  return result.isError ? (undefined as never) : (result.value as { logs: string[]; result?: unknown; cancelled?: string[] })
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
    after(disposeAll)

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

    it('a call of a missing tool with no tool near it says how to find one', async () => {
      const error = failed(await runCode(ctx, 'return await tools.zebra_walk({})'))
      expect(error.message).to.include("`tools.zebra_walk` is not a tool; find tools by what they do with `await tools.$search('...')` (line 1, column 20)")
    })

    it('a missing tool named by odd keys, a long name, a forged TypeError, or a thousand programs at once: each told as such', async () => {
      for (const name of ['__proto__', 'constructor', 'hasOwnProperty', 'toString']) {
        const error = failed(await runCode(ctx, `return await tools.${name}({})`))
        expect(error.message, name).to.include(`\`tools.${name}\` is not a tool; `)
      }
      // a name of 900 characters is read and answered (no nearest); one past the bound keeps V8's words, clipped
      const long = failed(await runCode(ctx, `return await tools.${'x'.repeat(900)}({})`))
      expect(long.message).to.include(`\`tools.${'x'.repeat(900)}\` is not a tool; find tools by what they do`)
      const longer = failed(await runCode(ctx, `return await tools.${'x'.repeat(5000)}({})`))
      expect(longer.message)
        .to.include(`TypeError: tools.${'x'.repeat(100)}`)
        .and.not.include('is not a tool')
      // what a program throws itself in the same words is told the same way: it is only words, no tool is called
      const forged = failed(await runCode(ctx, "throw new TypeError('tools.reed is not a function')"))
      expect(forged.message).to.include('`tools.reed` is not a tool; did you mean `tools.read`?')
      const many = await Promise.all(Array.from({ length: 1000 }, (_, i) => runCode(ctx, `return await tools.reed${i % 3 === 0 ? '' : i}({})`)))
      for (const result of many) expect(failed(result).message).to.match(/`tools\.reed\d*` is not a tool; (did you mean `tools\.read`\?|find tools)/)
    })

    it('says when the program returned undefined', async () => {
      const silent = await runCode(ctx, "const file = await tools.read({ path: 'a' })\nreturn file.txt")
      expect(silent.content).to.match(/^\(the program returned undefined and printed nothing: `return` the value you need/)
      const printed = await runCode(ctx, "console.log('hi')")
      expect(printed.content).to.equal('hi\n(the program returned undefined)')
    })

    it('lists the calls cancelled because the program returned first', async () => {
      const result = await runCode(ctx, "tools.slow({ ms: 1000 }).catch(() => {})\ntools.slow({ ms: 2000 }).catch(() => {})\nreturn 'early'")
      expect(succeeded(result).cancelled).to.deep.equal(['tools.slow({"ms":1000})', 'tools.slow({"ms":2000})'])
      expect(result.content).to.equal(
        'early\n(2 calls were cancelled because the program returned first: tools.slow({"ms":1000}), tools.slow({"ms":2000}); await every call before returning)',
      )
    })

    it('lists the calls cancelled when the program fails', async () => {
      const error = failed(await runCode(ctx, "tools.slow({ ms: 1000 }).catch(() => {})\nthrow new Error('gave up')"))
      expect(error.message).to.include('gave up').and.include('(1 call still running was cancelled: tools.slow({"ms":1000}))')
    })

    it('renders its result as compact JSON, cut at resultChars with a note; the value stays whole', async () => {
      const small = await runCode(ctx, "console.log('a')\nreturn { n: [1, 2], s: 'x' }")
      expect(small.content).to.equal('a\n{"n":[1,2],"s":"x"}')
      const big = await runCode(ctx, 'return Array.from({ length: 5000 }, (_, i) => ({ i }))')
      expect(big.content).to.have.length.below(RESULT_CHARS + 400)
      expect(big.content).to.match(
        new RegExp(`\\n\\[cut: the last \\d+ of \\d+ characters were left out \\(results are capped at ${RESULT_CHARS}\\)\\. Ask for less`),
      )
      expect(succeeded(big).result).to.have.length(5000)
    })

    it('has exactly the globals the prompt names', async () => {
      const usage = ctx.tools.wire().sections.find((s) => s.id === SDK_SECTION)!.text
      for (const name of ['`tools`', '`console`', '`ToolCallError`', 'the JS built-ins', ...ABSENT_GLOBALS]) expect(usage).to.include(name)
      const names = JSON.stringify([...PROGRAM_GLOBALS, ...ABSENT_GLOBALS])
      const result = await runCode(ctx, `return ${names}.map((name) => typeof globalThis[name] !== 'undefined')`)
      expect(succeeded(result).result).to.deep.equal([...PROGRAM_GLOBALS.map(() => true), ...ABSENT_GLOBALS.map(() => false)])
    })

    it('discovers, describes and calls a tool in one program', async () => {
      const program = `
        const [hit] = await tools.$search('open an issue')
        const types = await tools.$describe(hit.name)
        const made = await tools[hit.name]({ title: 'found it' })
        return { hit, described: types.includes('title: string'), made }`
      const value = succeeded(await runCode(ctx, program))
      expect(value.result).to.deep.equal({
        hit: { name: 'issue_create', summary: 'Open an issue in the tracker.' },
        described: true,
        made: { number: 7 },
      })
    })

    it('searches and describes only what the agent can see', async () => {
      const agent = createAgent(ctx, { name: `narrow-${backend}` })
      agent.ctx.tools.restrict({ deny: ['issue_create'] })
      try {
        const value = succeeded(await runCode(ctx, "return (await tools.$search('issue')).map((hit) => hit.name)", agent))
        expect(value.result).to.deep.equal([])
        const error = failed(await runCode(ctx, "await tools.$describe('issue_create')", agent))
        expect(error.message).to.include('uncaught ToolCallError UNKNOWN_TOOL from tools.$describe').and.include('`issue_create` is not a tool')
        // a shadow: the agent's own read is the one found and described, for it and an agent below it shown both
        agent.ctx.tools.register(
          defineTool({
            name: 'read',
            description: 'Read a note from the notebook. Only this agent has it.',
            parameters: t.object({ note: t.string() }),
            output: { schema: t.string() },
            execute: () => 'a note',
          }),
        )
        const below = createAgent(ctx, { name: `below-${backend}`, parent: agent })
        below.ctx.tools.presentAs('both')
        for (const who of [agent, below]) {
          const found = succeeded(await runCode(ctx, "return [await tools.$search('notebook'), await tools.$describe('read')]", who))
          expect(found.result).to.deep.equal([
            [{ name: 'read', summary: 'Read a note from the notebook.' }],
            '// Read a note from the notebook. Only this agent has it.\nread(args: { note: string }): Promise<string>\n',
          ])
        }
      } finally {
        agent.ctx.scope.dispose()
      }
    })
  })
}
