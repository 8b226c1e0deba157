// run_code end to end on the real default sandbox: the bridge re-enters the whole pipeline for each binding call,
// schedules nested calls, settles them, and renders what the program printed and returned.

import { createAgent, defineTool, type Execution, type NestedCallSettle, type NestedCallStart, t } from '@faber/core'
import { call, deployment, disposeAll, failingTool, value } from '@faber/core/testing'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'

Logger.levels.base = 0

interface Journal {
  events: string[]
  signals: Map<string, AbortSignal>
  /** told of each new event */
  watchers: Set<() => void>
}

/** resolves once `done()` holds, checked at every event of the journal, or once `signal` aborts */
function until(journal: Journal, done: () => boolean, signal: AbortSignal) {
  return new Promise<void>((resolve) => {
    const check = () => {
      if (!signal.aborted && !done()) return
      journal.watchers.delete(check)
      resolve()
    }
    journal.watchers.add(check)
    signal.addEventListener('abort', check, { once: true })
    check()
  })
}

function tools(ctx: Context, journal: Journal) {
  const log = (event: string) => {
    journal.events.push(event)
    for (const watcher of [...journal.watchers]) watcher()
  }
  ctx.tools.register(
    defineTool({
      name: 'peek',
      description: 'reads a key once the keys it meets have started (or, held, once aborted); safe to overlap',
      parameters: t.object({ key: t.string(), meet: t.array(t.string()).optional(), hold: t.boolean().optional() }),
      output: { schema: t.object({ key: t.string(), value: t.string() }) },
      isConcurrencySafe: () => true,
      annotations: { readOnly: true },
      execute: async ({ key, meet = [], hold = false }, run) => {
        log(`start ${key}`)
        journal.signals.set(key, run.signal)
        // meeting is how a test sees calls overlap: a call that cannot run beside the one it meets never ends
        await until(journal, () => !hold && meet.every((other) => journal.events.includes(`start ${other}`)), run.signal)
        log(`${run.signal.aborted ? 'aborted' : 'end'} ${key}`)
        return { key, value: key.toUpperCase() }
      },
    }),
  )
  ctx.tools.register(
    defineTool({
      name: 'put',
      description: 'writes a key; runs alone',
      parameters: t.object({ key: t.string() }),
      output: { schema: t.boolean() },
      execute: async ({ key }) => {
        log(`start put ${key}`)
        // one turn of the event loop, in which anything wrongly let run beside it would start
        await new Promise((resolve) => setImmediate(resolve))
        log(`end put ${key}`)
        return true
      },
    }),
  )
  ctx.tools.register(failingTool('explode'))
}

async function deploy(config: { maxParallelSubCalls?: number } = {}, runtime: 'worker' | 'isolate' = 'worker') {
  const Sandbox = runtime === 'worker' ? WorkerSandboxService : IsolateSandboxService
  const ctx = await deployment({ mode: 'code', ...config }, (ctx) => ctx.plugin(Sandbox, { poolSize: 1, limits: { cpuMs: 1000, wallMs: 5000 } }))
  const journal: Journal = { events: [], signals: new Map(), watchers: new Set() }
  tools(ctx, journal)
  return { ctx, journal }
}

function runCode(ctx: Context, code: string, extra: { signal?: AbortSignal; agent?: ReturnType<typeof createAgent> } = {}) {
  return call(ctx, 'run_code', { code, description: 'test program' }, extra)
}

describe('run_code on the worker sandbox', () => {
  let ctx: Context
  let journal: Journal
  beforeEach(async () => ({ ctx, journal } = await deploy()))
  afterEach(disposeAll)

  it('returns what the program logs and returns, rendered for the model', async () => {
    const result = await runCode(ctx, 'const a: number = 2\nconsole.log("two is", a)\nreturn { sum: a + 2 }')
    expect(value(result)).to.deep.equal({ logs: ['two is 2'], result: { sum: 4 } })
    expect(result.content).to.equal('two is 2\n{"sum":4}')
    expect((await runCode(ctx, 'return "plain text"')).content).to.equal('plain text')
    expect((await runCode(ctx, 'const x = 1')).content).to.match(/^\(the program returned undefined and printed nothing/)
  })

  it('binding calls return tool values; failures reject with ToolCallError', async () => {
    const result = await runCode(
      ctx,
      `const { value } = await tools.peek({ key: 'a'})
       try { await tools.explode({}) } catch (error) {
         if (!(error instanceof ToolCallError)) throw error
         return { value, name: error.name, toolName: error.toolName, code: error.code, message: error.message }
       }`,
    )
    expect(value(result)).to.deep.include({
      result: { value: 'A', name: 'ToolCallError', toolName: 'explode', code: 'TOOL_FAILED', message: '"explode" failed: E_BOOM: kaboom' },
    })
  })

  it('every policy sees nested calls, with the outer call as parent', async () => {
    const seen: Execution[] = []
    ctx.on('tools/pre-execute', (exec) => {
      seen.push(exec)
      return exec.name === 'put' ? { kind: 'deny', reason: 'puts are frozen' } : undefined
    })
    const result = await runCode(ctx, `try { await tools.put({ key: 'k' }) } catch (e) { return [e.code, e.message] }`)
    expect(value(result)).to.deep.include({ result: ['DENIED', 'puts are frozen'] })
    const [outer, nested] = seen
    expect(outer.name).to.equal('run_code')
    expect(nested.name).to.equal('put')
    expect(nested.parent).to.equal(outer.token)
    expect(journal.events).to.deep.equal([])
  })

  it('a bad argument rejects that call only', async () => {
    const result = await runCode(
      ctx,
      `const errors = []
       for (const bad of [{ key: 1n }, { key: undefined }, { key: () => 1 }]) {
         try { await tools.peek(bad as any) } catch (e) { errors.push(e.constructor.name) }
       }
       const wrongType = await tools.peek({ key: 5 } as any).catch((e) => e.code)
       const fine = await tools.peek({ key: 'ok'})
       return { errors, wrongType, fine: fine.value }`,
    )
    expect(value(result)).to.deep.include({ result: { errors: ['TypeError', 'TypeError', 'TypeError'], wrongType: 'INVALID_ARGUMENTS', fine: 'OK' } })
  })

  it('safe calls overlap; an exclusive call waits for the pool to drain and runs alone, in submission order', async () => {
    value(
      await runCode(
        ctx,
        `await Promise.all([
           tools.peek({ key: 'a', meet: ['b'] }), tools.peek({ key: 'b', meet: ['a'] }),
           tools.put({ key: 'x' }),
           tools.peek({ key: 'c', meet: ['d'] }), tools.peek({ key: 'd', meet: ['c'] }),
         ])`,
      ),
    )
    const at = (event: string) => journal.events.indexOf(event)
    expect(Math.max(at('start a'), at('start b'))).to.be.below(Math.min(at('end a'), at('end b')))
    expect(at('start put x')).to.be.above(Math.max(at('end a'), at('end b')))
    expect(Math.min(at('start c'), at('start d'))).to.be.above(at('end put x'))
    expect(Math.max(at('start c'), at('start d'))).to.be.below(Math.min(at('end c'), at('end d')))
  })

  it('maxParallelSubCalls bounds the overlap', async () => {
    await disposeAll()
    ;({ ctx, journal } = await deploy({ maxParallelSubCalls: 2 }))
    value(await runCode(ctx, `await Promise.all([tools.peek({ key: 'a', meet: ['b'] }), tools.peek({ key: 'b', meet: ['a'] }), tools.peek({ key: 'c' })])`))
    const at = (event: string) => journal.events.indexOf(event)
    expect(at('start c')).to.be.above(Math.min(at('end a'), at('end b')))
  })

  it('settlement aborts and drains outstanding calls before run_code returns, and refuses later ones', async () => {
    const settled: NestedCallSettle[] = []
    ctx.on('code/call-settle', (event) => void settled.push(event))
    const result = await runCode(
      ctx,
      `tools.peek({ key: 'slow', hold: true }).then(() => tools.put({ key: 'late' }), () => tools.put({ key: 'late' }))
       return 'left early'`,
    )
    expect(value(result)).to.deep.include({ result: 'left early' })
    expect(journal.signals.get('slow')?.aborted).to.equal(true)
    expect(journal.events).to.include('aborted slow')
    expect(settled.map((s) => s.name)).to.deep.equal(['peek'])
    // the pool has one worker and a worker's messages arrive in order: once the next program has returned, anything
    // the first one still sent has arrived (or its worker is gone)
    expect(value(await runCode(ctx, 'return 1'))).to.deep.include({ result: 1 })
    expect(journal.events.some((e) => e.includes('late'))).to.equal(false)
  })

  it('an approval wait holds only that call; the wall clock runs, the CPU budget does not count the wait', async () => {
    const granted: number[] = []
    ctx.on('tools/pre-execute', (exec) =>
      exec.name === 'peek' && (exec.arguments as { key: string }).key === 'guarded' ? { kind: 'ask', reason: 'guarded key' } : undefined,
    )
    const othersEnded = new Promise<void>((resolve) => {
      ctx.on('code/call-settle', () => {
        if (journal.events.includes('end a') && journal.events.includes('end b')) resolve()
      })
    })
    ctx.set('approval', {
      request: async () => {
        const asked = performance.now()
        await othersEnded
        // real time must pass here, it is what is tested: the wait outlasts the program's cpu budget (1000 ms) without
        // tripping it. fake timers cannot stand in, as the budget is the worker's measured cpu time
        await new Promise((resolve) => setTimeout(resolve, 1200 - (performance.now() - asked)))
        granted.push(journal.events.length)
        return 'allowed'
      },
    })
    const result = await runCode(
      ctx,
      `const [guarded, a, b] = await Promise.all([
         tools.peek({ key: 'guarded' }), tools.peek({ key: 'a', meet: ['b'] }), tools.peek({ key: 'b', meet: ['a'] }),
       ])
       return [guarded.value, a.value, b.value]`,
    )
    expect(value(result)).to.deep.include({ result: ['GUARDED', 'A', 'B'] })
    expect(journal.events.slice(0, granted[0])).to.deep.equal(['start a', 'start b', 'end a', 'end b'])
  })

  it('emits one start and one settle event per nested call', async () => {
    const starts: NestedCallStart[] = []
    const settles: NestedCallSettle[] = []
    ctx.on('code/call-start', (e) => void starts.push(e))
    ctx.on('code/call-settle', (e) => void settles.push(e))
    await runCode(ctx, `await tools.peek({ key: 'a'}); await tools.explode({}).catch(() => {})`)
    expect(starts.map((s) => [s.name, s.outerCallId === settles[0].outerCallId])).to.deep.equal([
      ['peek', true],
      ['explode', true],
    ])
    expect(settles.map((s) => [s.callId, s.result.isError])).to.deep.equal([
      [starts[0].callId, false],
      [starts[1].callId, true],
    ])
    expect(settles[0].durationMs).to.be.a('number')
  })

  it('failures come back as CODE_RUN_FAILED with the kind and the logs', async () => {
    const thrown = await runCode(ctx, 'console.log("before")\nthrow new RangeError("out of range")')
    expect(thrown.isError && thrown.error).to.deep.include({ code: 'CODE_RUN_FAILED', kind: 'exception', logs: ['before'] })
    expect(thrown.content).to.contain('RangeError: out of range').and.to.contain('--- logs ---\nbefore')
    const spun = await runCode(ctx, 'await tools.peek({ key: "a"})\nwhile (true) {}')
    expect(spun.isError && spun.error.kind).to.equal('timeout')
    const controller = new AbortController()
    // aborted once the program is certainly running: when its first nested call settles
    const dispose = ctx.on('code/call-settle', () => controller.abort())
    const aborted = await runCode(ctx, 'await tools.peek({ key: "a"})\nwhile (true) {}', { signal: controller.signal })
    dispose()
    expect(aborted.isError && aborted.error.kind).to.equal('abort')
    expect(value(await runCode(ctx, 'return 1'))).to.deep.equal({ logs: [], result: 1 })
  })

  it('an agent program binds exactly the tools that agent can see', async () => {
    const agent = createAgent(ctx, { name: 'narrow' })
    agent.ctx.tools.restrict({ allow: ['peek'] })
    const result = await runCode(ctx, 'return Object.keys(tools).sort()', { agent })
    expect(value(result)).to.deep.include({ result: ['$describe', '$search', 'peek'] })
  })
})

describe('run_code on the isolate sandbox', () => {
  let ctx: Context
  let journal: Journal
  before(async () => ({ ctx, journal } = await deploy({}, 'isolate')))
  after(disposeAll)

  it('runs programs that call tools, overlapping safe calls', async () => {
    const result = await runCode(
      ctx,
      `const r = await Promise.all([tools.peek({ key: 'a', meet: ['b'] }), tools.peek({ key: 'b', meet: ['a'] })])\nreturn r.map((x) => x.value)`,
    )
    expect(value(result)).to.deep.include({ result: ['A', 'B'] })
    expect(journal.events.slice(0, 2)).to.deep.equal(['start a', 'start b'])
  })

  it('stops a spinning program and stays healthy', async () => {
    const spun = await runCode(ctx, 'while (true) {}')
    expect(spun.isError && spun.error.kind).to.equal('timeout')
    expect(value(await runCode(ctx, 'return 2'))).to.deep.equal({ logs: [], result: 2 })
  })
})
