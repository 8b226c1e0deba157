import {
  assertStarted,
  type CodeRunRequest,
  createAgent,
  defineTool,
  type Execution,
  ExecutionToken,
  errorResult,
  type Json,
  type ToolResult,
  ToolResultError,
  type TSchema,
  t,
} from '@faber/core'
import { callId, deferred, deployment, echoTool, signal } from '@faber/core/testing'
import { expect } from 'chai'
import type { Context } from 'cordis'
import './helpers.ts'

function plugin(ctx: Context, name: string, apply: (ctx: Context) => void) {
  return ctx.plugin({ name, inject: ['tools'], apply })
}

function call(ctx: Context, name = 'echo', args: unknown = { text: 'hi' }, extra: Partial<Parameters<Context['tools']['execute']>[0]> = {}) {
  return ctx.tools.execute({ callId: callId(), name, arguments: args, signal: signal(), ...extra })
}

function code(result: ToolResult) {
  return result.isError ? result.error.code : 'OK'
}

describe('tools/pre-execute decisions', () => {
  for (const order of ['deny first', 'allow first']) {
    it(`deny wins over allow and ask whatever the load order (${order})`, async () => {
      const ctx = await deployment()
      let ran = 0
      ctx.tools.register(echoTool('echo', { onRun: () => ran++ }))
      const allow = () => plugin(ctx, 'lenient', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'allow' })))
      const ask = () => plugin(ctx, 'curious', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'why not' })))
      const deny = () => plugin(ctx, 'strict', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'deny', reason: 'echo is off today' })))
      for (const install of order === 'deny first' ? [deny, ask, allow] : [allow, ask, deny]) install()
      await assertStarted(ctx)
      const result = await call(ctx)
      expect(result.isError && result.error).to.deep.include({
        code: 'DENIED',
        message: 'echo is off today',
        deniedBy: { stage: 'pre-execute', plugin: 'strict' },
      })
      expect(ran).to.equal(0)
    })
  }

  it('ask without an approval service is a denial that says so', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    plugin(ctx, 'asker', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'echo is sensitive' })))
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(code(result)).to.equal('DENIED')
    expect(result.content).to.contain('needs approval (echo is sensitive) but no approval service is mounted')
  })

  it('an allow never overrides a later ask: approval is still consulted', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const asked: string[] = []
    plugin(ctx, 'lenient', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'allow' })))
    plugin(ctx, 'asker', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'check' })))
    ctx.set('approval', {
      request: async (req: { reason: string }) => {
        asked.push(req.reason)
        return 'allowed'
      },
    })
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(code(result)).to.equal('OK')
    expect(asked).to.deep.equal(['check'])
    expect(result.trace?.map((r) => `${r.stage}:${r.decision}`)).to.deep.equal(['pre-execute:allow', 'pre-execute:ask', 'approval:allowed'])
  })

  for (const [outcome, expected] of [
    ['rejected', 'was rejected by the approver'],
    ['unavailable', 'no approver answered'],
    ['maybe', 'no approver answered'],
  ] as const) {
    it(`an approval outcome "${outcome}" denies`, async () => {
      const ctx = await deployment()
      let ran = 0
      ctx.tools.register(echoTool('echo', { onRun: () => ran++ }))
      plugin(ctx, 'asker', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'check' })))
      ctx.set('approval', { request: async () => outcome })
      await assertStarted(ctx)
      const result = await call(ctx)
      expect(result.isError && result.error.deniedBy?.stage).to.equal('approval')
      expect(result.content).to.contain(expected)
      expect(ran).to.equal(0)
    })
  }

  it('an approval service that throws fails closed', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    plugin(ctx, 'asker', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'check' })))
    ctx.set('approval', {
      request: async () => {
        throw new Error('terminal went away')
      },
    })
    await assertStarted(ctx)
    expect(code(await call(ctx))).to.equal('DENIED')
  })

  it('an abort while approval waits ends as ABORTED_BEFORE_DISPATCH', async () => {
    const ctx = await deployment()
    let ran = 0
    ctx.tools.register(echoTool('echo', { onRun: () => ran++ }))
    plugin(ctx, 'asker', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'check' })))
    const controller = new AbortController()
    ctx.set('approval', {
      request: (req: { signal: AbortSignal }) =>
        new Promise((resolve) => {
          req.signal.addEventListener('abort', () => resolve('cancelled'))
          controller.abort()
        }),
    })
    await assertStarted(ctx)
    const result = await call(ctx, 'echo', { text: 'x' }, { signal: controller.signal })
    expect(code(result)).to.equal('ABORTED_BEFORE_DISPATCH')
    expect(ran).to.equal(0)
  })

  it('a malformed decision fails closed', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    plugin(ctx, 'sloppy', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'deny' }) as never))
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(result.isError && result.error.deniedBy).to.deep.equal({ stage: 'pre-execute', plugin: 'sloppy' })
    expect(result.content).to.contain('not a decision')
  })
})

describe('guards', () => {
  it('run after pre-execute: a denied call never reaches them', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const seen: string[] = []
    plugin(ctx, 'strict', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'deny', reason: 'no' })))
    ctx.tools.guard(() => void seen.push('guard'))
    await assertStarted(ctx)
    await call(ctx)
    expect(seen).to.deep.equal([])
  })

  it('global guards run before the agent chain, root first, and the first reason wins', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const parent = createAgent(ctx, { name: 'parent' })
    const child = createAgent(ctx, { name: 'child', parent })
    const order: string[] = []
    child.ctx.tools.guard(() => void order.push('child'))
    parent.ctx.tools.guard(() => {
      order.push('parent')
      return 'parent says no'
    })
    ctx.tools.guard(() => void order.push('global'))
    const result = await call(ctx, 'echo', { text: 'x' }, { agent: child })
    expect(order).to.deep.equal(['global', 'parent'])
    expect(result.isError && result.error.message).to.equal('parent says no')
    expect(code(await call(ctx))).to.equal('OK')
  })

  it('a guard that returns a promise fails closed (guards are synchronous)', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    ctx.tools.guard((() => Promise.resolve(undefined)) as never)
    const result = await call(ctx)
    expect(code(result)).to.equal('DENIED')
    expect(result.content).to.contain('guards must be synchronous')
  })

  it('an async guard that throws, or one that never settles, fails closed, and its rejection is not left unhandled', async () => {
    const ctx = await deployment()
    let ran = 0
    ctx.tools.register(echoTool('echo', { onRun: () => ran++ }))
    const unhandled: unknown[] = []
    const listener = (reason: unknown) => unhandled.push(reason)
    process.on('unhandledRejection', listener)
    try {
      plugin(ctx, 'async-throw', (ctx) => ctx.tools.guard((async () => Promise.reject(new Error('boom'))) as never))
      await assertStarted(ctx)
      const thrown = await call(ctx)
      expect(thrown.isError && thrown.error).to.deep.include({ code: 'DENIED', deniedBy: { stage: 'guard', plugin: 'async-throw' } })
      // unhandled rejections are reported once the microtasks of a macrotask drain: two turns of the loop
      await new Promise((resolve) => setImmediate(resolve))
      await new Promise((resolve) => setImmediate(resolve))
      expect(unhandled).to.deep.equal([])
    } finally {
      process.off('unhandledRejection', listener)
    }
    const stuck = await deployment()
    stuck.tools.register(echoTool('echo', { onRun: () => ran++ }))
    plugin(stuck, 'stuck', (ctx) => ctx.tools.guard((() => new Promise(() => {})) as never))
    await assertStarted(stuck)
    const never = await call(stuck)
    expect(never.isError && never.error).to.deep.include({ code: 'DENIED', deniedBy: { stage: 'guard', plugin: 'stuck' } })
    expect(ran).to.equal(0)
  })

  it('an empty reason still denies, with a default reason naming the plugin', async () => {
    const ctx = await deployment()
    let ran = 0
    ctx.tools.register(echoTool('echo', { onRun: () => ran++ }))
    plugin(ctx, 'terse', (ctx) => ctx.tools.guard(() => ''))
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(result.isError && result.error).to.deep.include({ code: 'DENIED', deniedBy: { stage: 'guard', plugin: 'terse' } })
    expect(result.content).to.equal('Error: the call to "echo" was denied by a guard of plugin "terse" (it gave no reason)')
    expect(ran).to.equal(0)
  })

  for (const [what, answer] of [
    ['null', null],
    ['a number', 42],
    ['zero', 0],
    ['false', false],
    ['an object', { allow: true }],
  ] as const) {
    it(`a guard returning ${what} fails closed`, async () => {
      const ctx = await deployment()
      let ran = 0
      ctx.tools.register(echoTool('echo', { onRun: () => ran++ }))
      plugin(ctx, 'odd', (ctx) => ctx.tools.guard((() => answer) as never))
      await assertStarted(ctx)
      const result = await call(ctx)
      expect(result.isError && result.error).to.deep.include({ code: 'DENIED', deniedBy: { stage: 'guard', plugin: 'odd' } })
      expect(result.content).to.contain('not a reason string')
      expect(result.trace).to.deep.include({ stage: 'guard', decision: 'failed-closed', by: 'odd', reason: result.isError && result.error.message })
      expect(ran).to.equal(0)
    })
  }
})

describe('fail closed', () => {
  const throwers = {
    'pre-execute listener (sync)': (ctx: Context) =>
      ctx.on('tools/pre-execute', () => {
        throw new Error('boom')
      }),
    'pre-execute listener (async)': (ctx: Context) =>
      ctx.on('tools/pre-execute', async () => {
        throw new Error('boom')
      }),
    guard: (ctx: Context) =>
      ctx.tools.guard(() => {
        throw new Error('boom')
      }),
    'execute wrapper (sync, before next)': (ctx: Context) =>
      ctx.on('tools/execute', () => {
        throw new Error('boom')
      }),
    'execute wrapper (async, after next)': (ctx: Context) =>
      ctx.on('tools/execute', async (_, next) => {
        await next()
        throw new Error('boom')
      }),
    'post-execute listener (sync)': (ctx: Context) =>
      ctx.on('tools/post-execute', () => {
        throw new Error('boom')
      }),
    'post-execute listener (async)': (ctx: Context) =>
      ctx.on('tools/post-execute', async () => {
        throw new Error('boom')
      }),
  }
  for (const [what, install] of Object.entries(throwers)) {
    it(`a throwing ${what} ends the call as an error, and the next call works`, async () => {
      const ctx = await deployment()
      let ran = 0
      ctx.tools.register(echoTool('echo', { onRun: () => ran++ }))
      const fork = plugin(ctx, 'faulty', install)
      await assertStarted(ctx)
      const result = await call(ctx)
      const ranBefore = what.startsWith('pre') || what === 'guard' || what.includes('before next')
      expect(ran).to.equal(ranBefore ? 0 : 1)
      // once the body ran, the model is told so: a denial would have it run the tool again
      if (ranBefore) {
        expect(code(result)).to.equal('DENIED')
        expect(result.isError && result.error.deniedBy?.plugin).to.equal('faulty')
      } else {
        expect(code(result)).to.equal('RESULT_WITHHELD')
        expect(result.isError && result.error.withheldBy?.plugin).to.equal('faulty')
        expect(result.isError && result.error.deniedBy).to.equal(undefined)
        expect(result.content).to.match(/^Error: "echo" ran, but its result was withheld because .* failed \(boom\); it may have taken effect/)
      }
      expect(result.content).to.contain('boom')
      fork.dispose()
      expect(code(await call(ctx))).to.equal('OK')
    })
  }

  it('a throwing tools/result observer is isolated: the others and the call go on', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const seen: string[] = []
    plugin(ctx, 'first', (ctx) => ctx.on('tools/result', () => void seen.push('first')))
    plugin(ctx, 'faulty', (ctx) =>
      ctx.on('tools/result', () => {
        throw new Error('boom')
      }),
    )
    plugin(ctx, 'last', (ctx) => ctx.on('tools/result', () => void seen.push('last')))
    await assertStarted(ctx)
    expect(code(await call(ctx))).to.equal('OK')
    expect(seen).to.deep.equal(['first', 'last'])
  })
})

describe('tools/execute wrappers', () => {
  it('nest outermost first and may replace the signal', async () => {
    const ctx = await deployment()
    let bodySignal: AbortSignal | undefined
    ctx.tools.register({
      ...echoTool(),
      execute: ({ text }: { text: string }, run) => {
        bodySignal = run.signal
        return { echoed: text }
      },
    })
    const order: string[] = []
    const replacement = new AbortController().signal
    const outerSignal = new AbortController().signal
    plugin(ctx, 'outer', (ctx) =>
      ctx.on('tools/execute', async (_, next) => {
        order.push('outer in')
        const result = await next(outerSignal)
        order.push('outer out')
        return result
      }),
    )
    let seenByInner: AbortSignal | undefined
    plugin(ctx, 'inner', (ctx) =>
      ctx.on('tools/execute', async (_, next, current) => {
        seenByInner = current
        order.push('inner in')
        const result = await next(replacement)
        order.push('inner out')
        return result
      }),
    )
    await assertStarted(ctx)
    expect(code(await call(ctx))).to.equal('OK')
    expect(order).to.deep.equal(['outer in', 'inner in', 'inner out', 'outer out'])
    expect(seenByInner).to.equal(outerSignal)
    expect(bodySignal).to.equal(replacement)
  })

  it('see a normalized result, never a raw throw from the body', async () => {
    const ctx = await deployment()
    ctx.tools.register({
      ...echoTool(),
      execute: () => {
        throw Object.assign(new Error('disk full'), { code: 'E_FULL' })
      },
    })
    let seen: ToolResult | undefined
    plugin(ctx, 'watcher', (ctx) => ctx.on('tools/execute', async (_, next) => (seen = await next())))
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(seen?.isError && seen.error).to.deep.include({ code: 'TOOL_FAILED', toolCode: 'E_FULL' })
    expect(result.content).to.equal('Error: "echo" failed: E_FULL: disk full')
  })

  it('a success a wrapper makes up is revalidated against the output schema', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    plugin(ctx, 'forger', (ctx) => ctx.on('tools/execute', async () => ({ isError: false, value: { echoed: 42 }, content: '42' })))
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(code(result)).to.equal('INVALID_OUTPUT')
    expect(result.content).to.contain('$.echoed: expected string, got integer')
  })

  it('a wrapper may answer with an error result of its own', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    plugin(ctx, 'timer', (ctx) => ctx.on('tools/execute', async () => errorResult('TOOL_TIMEOUT', '"echo" took longer than 5 ms')))
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(result.isError && result.error).to.deep.include({ code: 'TOOL_TIMEOUT', message: '"echo" took longer than 5 ms' })
  })

  it('something that is not a result fails closed', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    plugin(ctx, 'sloppy', (ctx) => ctx.on('tools/execute', async () => 'done' as never))
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(result.isError && result.error.deniedBy).to.deep.equal({ stage: 'execute', plugin: 'sloppy' })
  })
  it('a next() called after its wrapper returned runs nothing and resolves', async () => {
    const ctx = await deployment()
    let runs = 0
    ctx.tools.register(echoTool('echo', { onRun: () => runs++ }))
    let kept: ((signal?: AbortSignal) => Promise<ToolResult>) | undefined
    // a record in the trace, so the call's finish freezes it
    plugin(ctx, 'allower', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'allow' })))
    plugin(ctx, 'keeper', (ctx) =>
      ctx.on('tools/execute', async (_, next) => {
        kept = next
        return errorResult('TOOL_FAILED', 'answered without the body')
      }),
    )
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(result.content).to.equal('Error: answered without the body')
    const late = await kept!()
    expect(late.isError && late.error.code).to.equal('ABORTED_BEFORE_DISPATCH')
    expect(late.content).to.contain('a tools/execute wrapper of plugin "keeper" called next() after it returned')
    expect(runs).to.equal(0)
    expect(result.trace).to.have.length(1)
  })

  it('an inner wrapper failing after the call finished resolves the next() that reached it; the trace stays as it was', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const inner = deferred()
    let started: Promise<ToolResult> | undefined
    plugin(ctx, 'allower', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'allow' })))
    plugin(ctx, 'hasty', (ctx) =>
      ctx.on('tools/execute', async (_, next) => {
        started = next()
        return errorResult('TOOL_FAILED', 'did not wait')
      }),
    )
    plugin(ctx, 'slow', (ctx) =>
      ctx.on('tools/execute', async () => {
        await inner.promise
        throw new Error('too late')
      }),
    )
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(result.content).to.equal('Error: did not wait')
    inner.resolve()
    const late = await started!
    expect(late.isError && late.error.deniedBy).to.deep.equal({ stage: 'execute', plugin: 'slow' })
    expect(result.trace).to.deep.equal([{ stage: 'pre-execute', decision: 'allow', by: 'allower' }])
  })

  it('an inner wrapper failing before the call finished, after its outer wrapper answered, is not in the trace', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const inner = deferred()
    let started: Promise<ToolResult> | undefined
    plugin(ctx, 'hasty', (ctx) =>
      ctx.on('tools/execute', async (_, next) => {
        started = next()
        return errorResult('TOOL_TIMEOUT', 'gave up waiting')
      }),
    )
    plugin(ctx, 'slow', (ctx) =>
      ctx.on('tools/execute', async () => {
        await inner.promise
        throw new Error('too late')
      }),
    )
    // a post-execute listener keeps the call from finishing until the abandoned inner wrapper has failed
    plugin(ctx, 'reviewer', (ctx) =>
      ctx.on('tools/post-execute', async () => {
        inner.resolve()
        await started
      }),
    )
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(result.isError && result.error).to.deep.include({ code: 'TOOL_TIMEOUT', message: 'gave up waiting' })
    expect(result.trace).to.deep.equal([])
  })

  it("a wrapper's own denial names that wrapper; one it passes on from next() keeps who denied", async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    let forged = true
    plugin(ctx, 'outer', (ctx) =>
      ctx.on('tools/execute', async (_, next) => {
        const inner = await next()
        if (!forged) return inner
        return errorResult('DENIED', 'the approver said no', { deniedBy: { stage: 'approval', plugin: 'approval' } })
      }),
    )
    plugin(ctx, 'inner', (ctx) => ctx.on('tools/execute', async () => errorResult('DENIED', 'not on mondays')))
    await assertStarted(ctx)
    const own = await call(ctx)
    expect(own.isError && own.error).to.deep.include({ code: 'DENIED', message: 'the approver said no', deniedBy: { stage: 'execute', plugin: 'outer' } })
    forged = false
    const passed = await call(ctx)
    expect(passed.isError && passed.error).to.deep.include({ code: 'DENIED', message: 'not on mondays', deniedBy: { stage: 'execute', plugin: 'inner' } })
    // a result that is no denial names no one
    const other = await deployment()
    other.tools.register(echoTool())
    plugin(other, 'timer', (ctx) =>
      ctx.on('tools/execute', async () => errorResult('TOOL_TIMEOUT', 'slow', { deniedBy: { stage: 'guard', plugin: 'guards' } })),
    )
    await assertStarted(other)
    const timed = await call(other)
    expect(timed.isError && timed.error.code).to.equal('TOOL_TIMEOUT')
    expect(timed.isError && timed.error).not.to.have.property('deniedBy')
  })
})

describe('tools/post-execute', () => {
  it('each listener sees the result as amended so far; a replaced value is revalidated and rendered', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const seen: string[] = []
    plugin(ctx, 'shouter', (ctx) => ctx.on('tools/post-execute', (_, r) => (r.isError ? undefined : { kind: 'accept', value: { echoed: 'HI' } })))
    plugin(ctx, 'noter', (ctx) =>
      ctx.on('tools/post-execute', (_, r) => {
        seen.push(r.content)
        return { kind: 'accept', content: `${r.content} (reminder: you asked this before)` }
      }),
    )
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(seen).to.deep.equal(['HI'])
    expect(result).to.deep.include({ isError: false, value: { echoed: 'HI' }, content: 'HI (reminder: you asked this before)' })
  })

  it('an invalid replacement value fails closed', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    plugin(ctx, 'breaker', (ctx) => ctx.on('tools/post-execute', () => ({ kind: 'accept', value: { echoed: 1 } })))
    await assertStarted(ctx)
    expect(code(await call(ctx))).to.equal('RESULT_WITHHELD')
  })

  it('replacing content and value at once fails closed', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    plugin(ctx, 'greedy', (ctx) => ctx.on('tools/post-execute', () => ({ kind: 'accept', value: { echoed: 'a' }, content: 'a' })))
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(code(result)).to.equal('RESULT_WITHHELD')
    expect(result.content).to.contain('not both')
  })

  it('block ends the chain with its feedback', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    let later = 0
    plugin(ctx, 'breaker', (ctx) => ctx.on('tools/post-execute', () => ({ kind: 'block', feedback: 'stop echoing; answer the user' })))
    plugin(ctx, 'later', (ctx) => ctx.on('tools/post-execute', () => void later++))
    await assertStarted(ctx)
    const result = await call(ctx)
    expect(result.isError && result.error).to.deep.include({
      code: 'RESULT_WITHHELD',
      message: '"echo" ran, but plugin "breaker" withheld its result: stop echoing; answer the user',
      withheldBy: { stage: 'post-execute', plugin: 'breaker' },
    })
    expect(result.trace?.at(-1)).to.deep.include({ stage: 'post-execute', decision: 'block', by: 'breaker' })
    expect(later).to.equal(0)
  })

  it('a failure after the body ran is RESULT_WITHHELD; one whose body never ran (a wrapper answered) is still DENIED', async () => {
    const ctx = await deployment()
    let ran = 0
    ctx.tools.register(echoTool('echo', { onRun: () => ran++ }))
    ctx.tools.register(echoTool('held', { onRun: () => ran++ }))
    plugin(ctx, 'gate', (ctx) =>
      ctx.on('tools/execute', (exec, next) => (exec.name === 'held' ? Promise.resolve(errorResult('TOOL_FAILED', 'not now')) : next())),
    )
    plugin(ctx, 'faulty', (ctx) =>
      ctx.on('tools/post-execute', () => {
        throw new Error('boom')
      }),
    )
    await assertStarted(ctx)
    expect(code(await call(ctx, 'held'))).to.equal('DENIED')
    expect(ran).to.equal(0)
    const result = await call(ctx, 'echo')
    expect(ran).to.equal(1)
    expect(code(result)).to.equal('RESULT_WITHHELD')
  })

  it('a wrapper that denies after next() ran the body withholds the result instead', async () => {
    const ctx = await deployment()
    let ran = 0
    ctx.tools.register(echoTool('echo', { onRun: () => ran++ }))
    plugin(ctx, 'late', (ctx) =>
      ctx.on('tools/execute', async (_, next) => {
        await next()
        return errorResult('DENIED', 'too late to say no')
      }),
    )
    await assertStarted(ctx)
    const result = await call(ctx, 'echo')
    expect(ran).to.equal(1)
    expect(result.isError && result.error).to.deep.include({ code: 'RESULT_WITHHELD', withheldBy: { stage: 'execute', plugin: 'late' } })
    expect(result.content).to.contain('too late to say no')
  })
})

describe('a call runs the definition it was decided for', () => {
  // a pre-execute listener that holds the first call until the test lets it go
  function holdingPolicy(ctx: Context) {
    let arrived!: () => void
    let release!: () => void
    const waiting = new Promise<void>((resolve) => (arrived = resolve))
    const released = new Promise<void>((resolve) => (release = resolve))
    plugin(ctx, 'slow-policy', (ctx) =>
      ctx.on('tools/pre-execute', async () => {
        arrived()
        await released
        return { kind: 'allow' }
      }),
    )
    return { waiting, release }
  }

  function strictTool(
    ran: string[],
    label: string,
    parameters: TSchema<Record<string, Json>, boolean> = t.object({ text: t.string({ pattern: '^[a-z]+$' }) }),
  ) {
    return defineTool({
      name: 'echo',
      description: `echo (${label})`,
      parameters,
      output: { schema: t.unknown() },
      execute: (args) => {
        ran.push(label)
        return args
      },
    })
  }

  it('a tool registered anew while its call waits in policy ends the call as UNKNOWN_TOOL; neither body runs', async () => {
    const ctx = await deployment()
    const ran: string[] = []
    const dispose = ctx.tools.register(strictTool(ran, 'old'))
    const policy = holdingPolicy(ctx)
    await assertStarted(ctx)
    const pending = call(ctx, 'echo', { text: 'abc' })
    await policy.waiting
    dispose()
    // the new definition takes anything: the waiting arguments were never validated against it
    ctx.tools.register(strictTool(ran, 'new', t.object({ text: t.unknown() })))
    policy.release()
    const result = await pending
    expect(result.isError && result.error).to.deep.include({
      code: 'UNKNOWN_TOOL',
      message: 'tool "echo" changed while this call waited; call it again',
    })
    expect(ran).to.deep.equal([])
    // the next call is decided for the new definition and runs it
    expect(code(await call(ctx, 'echo', { text: 'abc' }))).to.equal('OK')
    expect(ran).to.deep.equal(['new'])
  })

  it('a tool disposed while its call waits for approval ends the call as UNKNOWN_TOOL', async () => {
    const ctx = await deployment()
    const ran: string[] = []
    const dispose = ctx.tools.register(strictTool(ran, 'old'))
    plugin(ctx, 'asker', (ctx) => ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'check' })))
    let grant!: (outcome: 'allowed') => void
    ctx.set('approval', { request: () => new Promise((resolve) => (grant = resolve)) })
    await assertStarted(ctx)
    const pending = call(ctx, 'echo', { text: 'abc' })
    while (!grant) await new Promise((resolve) => setImmediate(resolve))
    dispose()
    grant('allowed')
    const result = await pending
    expect(result.isError && result.error).to.deep.include({ code: 'UNKNOWN_TOOL' })
    expect(result.content).to.contain('no longer available; it was removed before it could run')
    expect(ran).to.deep.equal([])
  })

  it('a tool registered anew while its body runs cannot have a replacement value validated against the new schema', async () => {
    const ctx = await deployment()
    const ran: string[] = []
    let dispose!: () => void
    dispose = ctx.tools.register(
      defineTool({
        name: 'echo',
        description: 'echo',
        parameters: t.object({ text: t.string() }),
        output: { schema: t.object({ echoed: t.string() }) },
        execute: ({ text }) => {
          ran.push('old')
          dispose()
          ctx.tools.register(strictTool(ran, 'new', t.object({ text: t.unknown() })))
          return { echoed: text }
        },
      }),
    )
    plugin(ctx, 'replacer', (ctx) => ctx.on('tools/post-execute', () => ({ kind: 'accept', value: { anything: true } })))
    await assertStarted(ctx)
    const result = await call(ctx, 'echo', { text: 'abc' })
    // the old body ran: its result is withheld, never reported as a call that did not happen
    expect(result.isError && result.error).to.deep.include({ code: 'RESULT_WITHHELD', withheldBy: { stage: 'post-execute', plugin: 'replacer' } })
    expect(result.content).to.contain('tool "echo" changed while this call waited')
    expect(ran).to.deep.equal(['old'])
  })

  it('a call scheduled for a concurrency-safe tool that was registered anew before it ran ends as UNKNOWN_TOOL', async () => {
    const ctx = await deployment()
    const ran: string[] = []
    const tool = (label: string, safe: boolean) =>
      defineTool({
        name: 'echo',
        description: `echo (${label})`,
        parameters: t.object({ text: t.string() }),
        output: { schema: t.unknown() },
        execute: (args) => {
          ran.push(label)
          return args
        },
        isConcurrencySafe: () => safe,
      })
    const dispose = ctx.tools.register(tool('safe', true))
    await assertStarted(ctx)
    const prepared = ctx.tools.executor.prepare({ callId: callId(), name: 'echo', arguments: { text: 'a' } })
    // the caller overlaps it with other calls on the strength of this answer
    expect(prepared.mode).to.equal('parallel')
    dispose()
    ctx.tools.register(tool('exclusive', false))
    const result = await prepared.run(signal())
    expect(result.isError && result.error).to.deep.include({ code: 'UNKNOWN_TOOL', message: 'tool "echo" changed while this call waited; call it again' })
    expect(ran).to.deep.equal([])
    // a tool set changed elsewhere changes nothing for the call
    const again = ctx.tools.executor.prepare({ callId: callId(), name: 'echo', arguments: { text: 'b' } })
    expect(again.mode).to.equal('exclusive')
    ctx.tools.register(echoTool('other'))
    expect(code(await again.run(signal()))).to.equal('OK')
    expect(ran).to.deep.equal(['exclusive'])
  })

  it('a body cannot pass its failure off as a policy denial', async () => {
    const ctx = await deployment()
    let thrown: unknown
    ctx.tools.register(
      defineTool({
        name: 'impostor',
        description: 'throws what it is given',
        parameters: t.object({}),
        output: { schema: t.unknown() },
        execute: () => {
          throw thrown
        },
      }),
    )
    thrown = new ToolResultError(errorResult('DENIED', 'the approver said no', { deniedBy: { stage: 'approval', plugin: 'approval' } }))
    const denied = await call(ctx, 'impostor', {})
    expect(denied.isError && denied.error).to.deep.include({ code: 'TOOL_FAILED', message: '"impostor" failed: the approver said no' })
    expect(denied.isError && denied.error).not.to.have.property('deniedBy')
    thrown = new ToolResultError(errorResult('TOOL_FAILED', 'disk full', { deniedBy: { stage: 'guard', plugin: 'guards' } }))
    const failed = await call(ctx, 'impostor', {})
    expect(failed.isError && failed.error).to.deep.include({ code: 'TOOL_FAILED', message: 'disk full' })
    expect(failed.isError && failed.error).not.to.have.property('deniedBy')
  })
})

describe('cancellation', () => {
  it('a pre-aborted call runs nothing and no policy', async () => {
    const ctx = await deployment()
    let seen = 0
    ctx.tools.register(echoTool('echo', { onRun: () => seen++ }))
    ctx.on('tools/pre-execute', () => void seen++)
    const controller = new AbortController()
    controller.abort()
    const result = await call(ctx, 'echo', { text: 'x' }, { signal: controller.signal })
    expect(result.isError && result.error).to.deep.include({
      code: 'ABORTED_BEFORE_DISPATCH',
      message: 'the call to "echo" was cancelled before it started; nothing ran',
    })
    expect(seen).to.equal(0)
  })

  it('an abort while the body runs replaces a success with ABORTED, but not an error', async () => {
    const ctx = await deployment()
    const controller = new AbortController()
    let fail = false
    ctx.tools.register(
      defineTool({
        name: 'slow',
        description: 'finishes whatever happens',
        parameters: t.object({}),
        output: { schema: t.string() },
        execute: async () => {
          controller.abort()
          await new Promise((r) => setImmediate(r))
          if (fail) throw new Error('it broke anyway')
          return 'done'
        },
      }),
    )
    const aborted = await call(ctx, 'slow', {}, { signal: controller.signal })
    expect(aborted.isError && aborted.error.code).to.equal('ABORTED')
    fail = true
    const failed = await call(ctx, 'slow', {}, { signal: new AbortController().signal })
    expect(code(failed)).to.equal('TOOL_FAILED')
  })

  it('a body that ignores its signal is awaited, never raced away', async () => {
    const ctx = await deployment()
    const controller = new AbortController()
    let finished = false
    ctx.tools.register(
      defineTool({
        name: 'stubborn',
        description: 'ignores its signal',
        parameters: t.object({}),
        output: { schema: t.string() },
        execute: async () => {
          // aborted while the body still runs; the body then outlives the abort by a full turn of the event loop
          controller.abort()
          await new Promise((r) => setImmediate(r))
          finished = true
          return 'done'
        },
      }),
    )
    const result = await call(ctx, 'stubborn', {}, { signal: controller.signal })
    expect(finished).to.equal(true)
    expect(code(result)).to.equal('ABORTED')
  })
})

describe('error codes', () => {
  it('UNKNOWN_TOOL lists what is available', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const result = await call(ctx, 'ehco')
    expect(result.content).to.equal('Error: unknown tool "ehco": no tool of that name is available here; available tools: echo')
  })

  it('INVALID_ARGUMENTS for arguments that are not lossless JSON', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    const sparse = [1, 2, 3]
    delete sparse[1]
    for (const [args, problem] of [
      [{ text: 1n }, '$.text is a BigInt, which is not JSON'],
      [{ text: undefined }, '$.text is undefined, which is not JSON'],
      [{ text: () => 1 }, '$.text is a function, which is not JSON'],
      [cyclic, '$.self refers back to one of its own ancestors (a cycle)'],
      [{ text: sparse }, '$.text[1] is a hole in a sparse array'],
      [
        {
          get text() {
            throw new Error('nope')
          },
        },
        '$.text could not be read: reading it threw (nope)',
      ],
      [{ text: new Date(0) }, '$.text is a Date, which is not JSON'],
    ] as const) {
      const result = await call(ctx, 'echo', args)
      expect(code(result)).to.equal('INVALID_ARGUMENTS')
      expect(result.content).to.contain(problem)
    }
  })

  it('INVALID_ARGUMENTS for arguments that do not match the schema, path-qualified', async () => {
    const ctx = await deployment()
    ctx.tools.register(
      defineTool({
        name: 'deep',
        description: 'nested arguments',
        parameters: t.object({ items: t.array(t.object({ n: t.integer({ minimum: 1 }) })) }),
        output: { schema: t.null() },
        execute: () => null,
      }),
    )
    const result = await call(ctx, 'deep', { items: [{ n: 1 }, { n: 0 }] })
    expect(result.content).to.equal('Error: invalid arguments for "deep": $.items[1].n: expected a number >= 1, got 0. Fix the arguments and call again.')
    expect(code(await call(ctx, 'deep', { items: [], extra: 1 }))).to.equal('INVALID_ARGUMENTS')
  })

  it('INVALID_OUTPUT for a value that is not JSON or off-schema', async () => {
    const ctx = await deployment()
    let value: unknown = { echoed: 1n }
    ctx.tools.register({ ...echoTool(), execute: () => value as never })
    expect((await call(ctx)).content).to.contain('returned a value that is not JSON: $.echoed is a BigInt')
    value = { echoed: 3 }
    expect((await call(ctx)).content).to.contain('does not match its output schema: $.echoed: expected string, got integer')
  })

  it('TOOL_FAILED carries a tool code when the body has one', async () => {
    const ctx = await deployment()
    ctx.tools.register({
      ...echoTool(),
      execute: () => {
        throw new TypeError('plain failure')
      },
    })
    const result = await call(ctx)
    expect(result.isError && result.error).to.deep.equal({ code: 'TOOL_FAILED', message: '"echo" failed: plain failure' })
  })

  it('CODE_RUN_FAILED when no code runtime is mounted, and for programs that do not parse', async () => {
    const ctx = await deployment({ mode: 'code' })
    const none = await call(ctx, 'run_code', { code: 'return 1', description: 'one' })
    expect(none.isError && none.error).to.deep.include({ code: 'CODE_RUN_FAILED', kind: 'unavailable' })
    expect(none.content).to.contain('no code runtime is mounted')
    ctx.set('codeRuntime', { backend: 'never', run: () => Promise.reject(new Error('must not run')) })
    const enumerated = await call(ctx, 'run_code', { code: 'enum Color { Red }\nreturn Color.Red', description: 'enum' })
    expect(enumerated.isError && enumerated.error).to.deep.include({ code: 'CODE_RUN_FAILED', kind: 'syntax', line: 1 })
    expect(enumerated.content).to.contain('enum is not supported')
    const broken = await call(ctx, 'run_code', { code: 'const a = 1\nconst = 2', description: 'broken' })
    expect(broken.isError && broken.error).to.deep.include({ kind: 'syntax', line: 2 })
    // a one-line program that ends too early fails at its own end, not on the line the wrapper adds after it
    const cut = await call(ctx, 'run_code', { code: 'return (1 +', description: 'cut' })
    expect(cut.isError && cut.error).to.deep.include({ kind: 'syntax', line: 1, column: 12 })
    expect(cut.content).to.contain('line 1, column 12 (the end of the program)')
  })

  it('results are frozen', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const result = await call(ctx)
    expect(Object.isFrozen(result)).to.equal(true)
    expect(Object.isFrozen(result.isError ? result.error : result.value)).to.equal(true)
  })

  it('the execution and its arguments are frozen, arguments left out too: a listener cannot change what the body runs on', async () => {
    const ctx = await deployment()
    let received: unknown
    ctx.tools.register(
      defineTool({
        name: 'opts',
        description: '',
        parameters: t.object({ extra: t.string().optional() }),
        output: { schema: t.unknown() },
        execute: (args) => (received = args),
      }),
    )
    const tried: string[] = []
    ctx.on('tools/pre-execute', (exec) => {
      for (const change of [() => Object.assign(exec.arguments as object, { extra: 'injected' }), () => Object.assign(exec, { name: 'other' })]) {
        try {
          change()
        } catch {
          tried.push('refused')
        }
      }
    })
    for (const args of [undefined, {}, { extra: 'given' }]) {
      const result = await ctx.tools.execute({ callId: callId(), name: 'opts', arguments: args, signal: signal() })
      expect(result.content).to.equal(JSON.stringify(args ?? {}))
      expect(received).to.deep.equal(args ?? {})
    }
    expect(tried).to.deep.equal(Array(6).fill('refused'))
  })
})

describe('agent scopes', () => {
  it('an agent listener sees its own and its descendants calls; a global one sees all', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const parent = createAgent(ctx, { name: 'parent' })
    const child = createAgent(ctx, { name: 'child', parent })
    const sibling = createAgent(ctx, { name: 'sibling' })
    const seen: string[] = []
    const by = (exec: Execution) => exec.agent?.name ?? 'global'
    parent.ctx.on('tools/result', (exec) => void seen.push(`parent saw ${by(exec)}`))
    ctx.on('tools/result', (exec) => void seen.push(`global saw ${by(exec)}`))
    for (const agent of [undefined, parent, child, sibling]) await call(ctx, 'echo', { text: 'x' }, { agent })
    expect(seen).to.deep.equal(['global saw global', 'parent saw parent', 'global saw parent', 'parent saw child', 'global saw child', 'global saw sibling'])
  })

  it('tools.listen registers pipeline listeners scoped, ordered and disposed like ctx.on', async () => {
    const ctx = await deployment()
    ctx.tools.register(echoTool())
    const agent = createAgent(ctx, { name: 'scoped' })
    const seen: string[] = []
    const fork = agent.ctx.plugin({
      name: 'fast-policy',
      inject: ['tools'],
      apply: (ctx: Context) => {
        ctx.tools.listen('tools/pre-execute', (exec) => ((exec.arguments as { text: string }).text === 'no' ? { kind: 'deny', reason: 'said no' } : undefined))
        ctx.tools.listen('tools/result', (exec) => void seen.push(`listen ${exec.agent?.name ?? 'global'}`))
      },
    })
    ctx.on('tools/result', (exec) => void seen.push(`on ${exec.agent?.name ?? 'global'}`))
    ctx.tools.listen('tools/result', () => void seen.push('first'), { prepend: true })
    await assertStarted(ctx)
    const denied = await call(ctx, 'echo', { text: 'no' }, { agent })
    expect(denied.isError && denied.error.deniedBy).to.deep.equal({ stage: 'pre-execute', plugin: 'fast-policy' })
    expect(code(await call(ctx, 'echo', { text: 'no' }))).to.equal('OK')
    expect(seen).to.deep.equal(['first', 'listen scoped', 'on scoped', 'first', 'on global'])
    fork.dispose()
    expect(code(await call(ctx, 'echo', { text: 'no' }, { agent }))).to.equal('OK')
    expect(() => ctx.tools.listen('tools/changed' as never, (() => {}) as never)).to.throw('not a pipeline event')
  })

  it('a plugin loaded on an agent cannot leak into its parent, and leaves with its plugin', async () => {
    const ctx = await deployment()
    const agent = createAgent(ctx, { name: 'scoped' })
    const fork = agent.ctx.plugin({
      name: 'agent-tools',
      inject: ['tools'],
      apply: (ctx: Context) => {
        ctx.tools.register(echoTool('private'))
        ctx.on('tools/pre-execute', () => ({ kind: 'deny', reason: 'scoped deny' }))
      },
    })
    await assertStarted(ctx)
    ctx.tools.register(echoTool('public'))
    expect(ctx.tools.get('private')).to.equal(undefined)
    expect(ctx.tools.get('private', agent)?.name).to.equal('private')
    expect(code(await call(ctx, 'public'))).to.equal('OK')
    expect(code(await call(ctx, 'public', { text: 'x' }, { agent }))).to.equal('DENIED')
    fork.dispose()
    expect(ctx.tools.get('private', agent)).to.equal(undefined)
    expect(code(await call(ctx, 'public', { text: 'x' }, { agent }))).to.equal('OK')
  })

  it('an agent is disposed with the plugin that created it', async () => {
    const ctx = await deployment()
    let agentRef: ReturnType<typeof createAgent> | undefined
    const fork = ctx.plugin({ name: 'maker', inject: ['tools'], apply: (ctx: Context) => void (agentRef = createAgent(ctx, { name: 'temp' })) })
    await assertStarted(ctx)
    expect(ctx.tools.agent('temp')).to.equal(agentRef)
    fork.dispose()
    expect(ctx.tools.agent('temp')).to.equal(undefined)
    expect(() => ctx.tools.schemas(agentRef)).to.throw('has been disposed')
  })

  it('nested calls run with the outer call agent and see their parent token', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register(echoTool())
    const agent = createAgent(ctx, { name: 'coder' })
    const execs: Execution[] = []
    ctx.on('tools/result', (exec) => void execs.push(exec))
    ctx.set('codeRuntime', {
      name: 'scripted',
      run: async (request: { call(name: string, json: string): Promise<unknown> }) => {
        await request.call('echo', '{"text":"a"}')
        return { ok: true, logs: [] }
      },
    })
    await call(ctx, 'run_code', { code: 'await tools.echo({ text: "a" })', description: 'nested' }, { agent, callId: 'outer' })
    const [nested, outer] = execs
    expect(nested.agent).to.equal(agent)
    expect(nested.parent).to.equal(outer.token)
    expect(nested.rootCallId).to.equal('outer')
    expect(nested.callId).to.equal('outer/1')
  })
})

describe("a nested call's reply", () => {
  it('is the JSON text of the value its result holds: rendered, replaced by a listener, or with its content capped', async () => {
    const ctx = await deployment({ mode: 'code', resultChars: 256 })
    ctx.tools.register(
      defineTool({
        name: 'obj',
        description: 'an object with padding',
        parameters: t.object({ n: t.integer() }),
        output: { schema: t.object({ n: t.integer(), pad: t.string() }) },
        execute: ({ n }) => ({ n, pad: 'x'.repeat(300) }),
      }),
    )
    plugin(ctx, 'replacer', (ctx) =>
      ctx.on('tools/post-execute', (exec, result) =>
        (exec.arguments as { n: number }).n === 2 && !result.isError ? { kind: 'accept', value: { n: 20, pad: '' } } : undefined,
      ),
    )
    await assertStarted(ctx)
    const contents: string[] = []
    ctx.on('tools/result', (exec, result) => void (exec.parent && contents.push(result.content)))
    let replies: unknown[] = []
    ctx.set('codeRuntime', {
      backend: 'scripted',
      run: async (request: { call(name: string, json: string): Promise<unknown> }) => {
        // the first settles at once, the others wait their turn (obj is exclusive) and settle after another rendered
        replies = await Promise.all([1, 2, 3].map((n) => request.call('obj', `{"n":${n}}`)))
        replies.push(await request.call('obj', '{"n":4}'))
        return { ok: true, logs: [] }
      },
    })
    const result = await call(ctx, 'run_code', { code: 'return 1', description: 'nested objects' })
    expect(result.isError).to.equal(false)
    const pad = 'x'.repeat(300)
    expect(replies).to.deep.equal([
      { ok: true, value: `{"n":1,"pad":"${pad}"}` },
      { ok: true, value: '{"n":20,"pad":""}' },
      { ok: true, value: `{"n":3,"pad":"${pad}"}` },
      { ok: true, value: `{"n":4,"pad":"${pad}"}` },
    ])
    expect(contents[0]).to.match(/^\{"n":1,"pad":"x+\n\[cut: /)
  })

  it('comes back as it is through callNow when nothing held the call up, as a promise when something did, and always as a promise through call', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register(echoTool())
    const later = deferred<void>()
    ctx.tools.register(
      defineTool({
        name: 'slow',
        description: 'answers later',
        parameters: t.object({}),
        output: { schema: t.null() },
        execute: async () => {
          await later.promise
          return null
        },
      }),
    )
    const kinds: string[] = []
    ctx.set('codeRuntime', {
      backend: 'scripted',
      run: async (request: CodeRunRequest) => {
        const now = request.callNow?.('echo', '{"text":"a"}')
        kinds.push(now instanceof Promise ? 'promise' : JSON.stringify(now))
        const slow = request.callNow?.('slow', '{}')
        kinds.push(slow instanceof Promise ? 'promise' : 'reply')
        later.resolve()
        kinds.push(JSON.stringify(await slow))
        const wrapped = request.call('echo', '{"text":"b"}')
        kinds.push(wrapped instanceof Promise ? JSON.stringify(await wrapped) : 'reply')
        return { ok: true, logs: [] }
      },
    })
    expect((await call(ctx, 'run_code', { code: 'return 1', description: 'callNow' })).isError).to.equal(false)
    expect(kinds).to.deep.equal([
      '{"ok":true,"value":"{\\"echoed\\":\\"a\\"}"}',
      'promise',
      '{"ok":true,"value":"null"}',
      '{"ok":true,"value":"{\\"echoed\\":\\"b\\"}"}',
    ])
  })
})

describe('a parent token names a live execution of this registry, or nothing', () => {
  it('refuses a call whose parent is forged, finished, proxied or of another registry, before any policy observes it', async () => {
    const ctx = await deployment({ mode: 'code' })
    ctx.tools.register(echoTool())
    const observed: string[] = []
    let live: Execution | undefined
    plugin(ctx, 'observer', (ctx) =>
      ctx.on('tools/pre-execute', (exec) => {
        observed.push(exec.callId)
        if (exec.name === 'run_code') live = exec
      }),
    )
    await assertStarted(ctx)
    const other = await deployment({ mode: 'code' })
    let otherLive: Execution | undefined
    other.on('tools/pre-execute', (exec) => void (exec.name === 'run_code' && (otherLive = exec)))
    const finished = (await call(ctx, 'run_code', { code: 'return 1', description: 'done' }, { callId: 'finished' })).isError
    expect(finished).to.equal(true) // no code runtime yet: run_code fails, its token is finished all the same
    const finishedToken = live!.token
    const results: Record<string, ToolResult> = {}
    const nested = (name: string, parent: unknown) =>
      ctx.tools.execute({ callId: name, name: 'echo', arguments: { text: 'x' }, signal: signal(), parent: parent as Execution['token'] })
    const runtime = (inner: () => Promise<void>) => ({
      backend: 'scripted',
      run: async () => {
        await inner()
        return { ok: true, logs: [] }
      },
    })
    other.set(
      'codeRuntime',
      runtime(async () => {
        results.otherRegistry = await nested('other-registry', otherLive!.token)
      }),
    )
    ctx.set(
      'codeRuntime',
      runtime(async () => {
        results.forged = await nested('forged', new ExecutionToken(live!.token.id, live!.token.callId, 'run_code'))
        results.finished = await nested('finished-parent', finishedToken)
        results.proxied = await nested('proxied', new Proxy(live!.token, {}))
        await call(other, 'run_code', { code: 'return 1', description: 'other' })
        results.live = await nested('live', live!.token)
      }),
    )
    const outer = await call(ctx, 'run_code', { code: 'return 1', description: 'outer' }, { callId: 'outer' })
    expect(outer.isError, outer.content).to.equal(false)
    for (const key of ['forged', 'finished', 'proxied', 'otherRegistry']) expect(code(results[key]), key).to.equal('ABORTED_BEFORE_DISPATCH')
    expect(code(results.live)).to.equal('OK')
    expect(observed).to.deep.equal(['finished', 'outer', 'live'])
  })
})
