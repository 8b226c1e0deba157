// the hazard suite every CodeRuntime backend must pass; each backend's spec calls `describeHazards` once.
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { expect } from 'chai'
import { Context } from 'cordis'
import { after, afterEach, before, beforeEach, describe, it } from 'mocha'
import type { Pool, SandboxService } from '../service.ts'
import type { BridgeReply, CodeRunLimits, CodeRunOutcome, CodeRunRequest } from '../types.ts'

export const hazardLimits: CodeRunLimits = { cpuMs: 200, wallMs: 1000, memoryMb: 32, outputBytes: 4096 }

const secrets = () => {
  const values = [String(process.pid)]
  try {
    values.push(readFileSync('/etc/hostname', 'utf8').trim())
  } catch {}
  return values.filter((value) => value.length > 2)
}

// tries `body` (an async function body that returns what it reached) and reports what it got
const probe = (body: string) => `
let got
try {
  got = await (async () => { ${body} })()
} catch (error) {
  return 'blocked: ' + (error && error.name)
}
try { if (got && typeof got.pid === 'number') return 'ESCAPED pid ' + got.pid } catch {}
try { if (typeof got === 'function') return 'ESCAPED ' + got('fs').readFileSync('/etc/hostname', 'utf8') } catch {}
try { if (got && typeof got.readFileSync === 'function') return 'ESCAPED ' + got.readFileSync('/etc/hostname', 'utf8') } catch {}
return 'contained: ' + typeof got
`

// a probe that tries the Function constructor of every value it is given
const reach = `
const reach = (values) => {
  for (const value of values) {
    try {
      if (value === null || value === undefined) continue
      const p = value.constructor.constructor('return typeof process === "object" ? process : undefined')()
      if (p) return p
    } catch {}
  }
}
`

/** a case that is one program and its outcome: success with `result` (any result when it has none), or `fails`; `also` checks more */
interface Case {
  code: string
  result?: unknown
  fails?: [kind: string, message?: RegExp]
  limits?: Partial<CodeRunLimits>
  also?: (outcome: CodeRunOutcome) => void
}

/**
 * `makeRuntime` builds the sandbox with `hazardLimits` (a test double may take a roomier CPU budget): a case's own
 * limits override those, and the rest are the sandbox's.
 * `skip`: titles of groups (`memory`, `escapes`, …) or tests that do not apply to this backend: they are listed as pending,
 * not run. only for a backend that does not claim what they check (a test double, say), never to hide a failure
 */
export function describeHazards(name: string, makeRuntime: () => Pool, options: { skip?: string[] } = {}) {
  const skip = new Set(options.skip)
  const group = (title: string, body: () => void) => (skip.has(title) ? describe.skip : describe)(title, body)
  const test = (title: string, body: () => Promise<void>) => (skip.has(title) ? it.skip : it)(title, body)
  describe(`${name}: hazards`, function () {
    this.timeout(10000)
    let runtime: Pool
    let calls: { name: string; json: string; at: number }[]
    let settledAt: number
    // `later` calls waiting on the host at once, and the most seen
    let laterWaiting = 0
    let peakLater = 0

    before(() => {
      runtime = makeRuntime()
    })
    after(() => runtime.close())
    beforeEach(() => {
      calls = []
      settledAt = Number.POSITIVE_INFINITY
      peakLater = 0
    })

    // the tools a program may call, and what the host answers each
    const host: Record<string, (json: string) => BridgeReply | Promise<BridgeReply>> = {
      echo: (json) => ({ ok: true, value: json }),
      fail: () => ({ ok: false, message: 'the disk is full', code: 'E_FULL' }),
      slow: async (json) => {
        await sleep(JSON.parse(json).ms)
        return { ok: true, value: '"slept"' }
      },
      never: () => new Promise(() => {}),
      throws: () => {
        throw new Error('the host bridge broke')
      },
      huge: () => ({ ok: true, value: JSON.stringify('x'.repeat(9e6)) }),
      'a-b': () => ({ ok: true, value: '"a-b"' }),
      later: async (json) => {
        peakLater = Math.max(peakLater, ++laterWaiting)
        await sleep(1)
        laterWaiting--
        return { ok: true, value: json }
      },
    }
    const call = async (name: string, json: string) => {
      calls.push({ name, json, at: performance.now() })
      return host[name](json)
    }

    const run = async (code: string, options: { signal?: AbortSignal; limits?: Partial<CodeRunLimits> } = {}) => {
      const { signal = new AbortController().signal, limits } = options
      const outcome = await runtime.run({ code, tools: Object.keys(host), call, signal, limits })
      settledAt = performance.now()
      return outcome
    }

    const expectOk = (outcome: CodeRunOutcome, result?: unknown) => {
      if (!outcome.ok) expect.fail(`expected success, got ${outcome.kind}: ${outcome.message}`)
      if (result !== undefined) expect(JSON.parse(outcome.result!)).to.deep.equal(result)
      return outcome
    }
    const expectFailure = (outcome: CodeRunOutcome, kind: string, message?: RegExp) => {
      if (outcome.ok) expect.fail(`expected ${kind}, got success with ${outcome.result}`)
      expect(outcome.kind, outcome.message).to.equal(kind)
      if (message) expect(outcome.message).to.match(message)
      return outcome
    }
    const expectContained = (outcome: CodeRunOutcome) => {
      const text = JSON.stringify(outcome)
      expect(text).not.to.include('ESCAPED')
      for (const secret of secrets()) expect(text).not.to.include(secret)
    }

    const cases = (table: Record<string, Case>) => {
      for (const [title, { code, result, fails, limits, also }] of Object.entries(table))
        test(title, async () => {
          const outcome = await run(code, { limits })
          if (fails) expectFailure(outcome, ...fails)
          else expectOk(outcome, result)
          also?.(outcome)
        })
    }

    // every test leaves a runtime that still works, and a host whose prototypes are clean
    afterEach(async () => {
      await sleep(5)
      const late = calls.filter((c) => c.at > settledAt)
      expect(late, 'calls reached the host after the run settled').to.deep.equal([])
      expectOk(await run('return [1 + 1, typeof tools.echo]'), [2, 'function'])
      expect(({} as any).polluted).to.equal(undefined)
      expect([].map).to.equal(Array.prototype.map)
    })

    group('results and logs', () => {
      cases({
        'returns JSON': { code: 'return { a: [1, "x", null, true], "b-c": { d: 2.5 } }', result: { a: [1, 'x', null, true], 'b-c': { d: 2.5 } } },
        'supports top-level await and return': { code: 'const x = await Promise.resolve(20)\nreturn x + 1', result: 21 },
        'reports a syntax error': { code: 'return (1 +', fails: ['exception', /SyntaxError/] },
        'reports a thrown non-error': { code: 'throw "plain"', fails: ['exception', /plain/] },
        'returns nothing for undefined': { code: 'const x = 1', also: (outcome) => expect(outcome).not.to.have.property('result') },
      })

      test('captures console output', async () => {
        const code =
          'console.log("a", 1, { b: [2] }, 3n, undefined); console.warn("w"); console.error(new TypeError("e")); console.info("i"); console.debug("d")'
        const outcome = expectOk(await run(code))
        expect(outcome.logs[0]).to.equal('a 1 {b: [2]} 3n undefined')
        expect(outcome.logs[1]).to.match(/w$/)
        expect(outcome.logs[2]).to.match(/TypeError: e/)
        expect(outcome.logs.slice(3)).to.deep.equal(['i', 'd'])
      })

      test('rejects a return value that is not JSON', async () => {
        const outcome = expectFailure(await run('return { when: new Date(0) }'), 'exception', /\$\.when is a Date, which is not JSON/)
        expect(outcome.message).to.match(/return value/)
        expectFailure(await run('return { n: 1n }'), 'exception', /BigInt/)
      })

      test('reports an uncaught error with its position', async () => {
        const outcome = expectFailure(await run('const a = 1\n\n  null.x'), 'exception', /TypeError/)
        expect(outcome).to.include({ line: 3, column: 8 })
      })
    })

    group('bindings', () => {
      test('call the host with JSON and resolve with the reply', async () => {
        expectOk(await run('return await tools.echo({ path: "a.txt", n: [1, 2] })'), { path: 'a.txt', n: [1, 2] })
        expect(calls).to.have.length(1)
        expect(calls[0]).to.include({ name: 'echo', json: '{"path":"a.txt","n":[1,2]}' })
      })

      cases({
        'reach exotic names': { code: 'return await tools["a-b"]({})', result: 'a-b' },
        'send an empty object for a missing argument': { code: 'return await tools.echo()', result: {} },
        'reject with ToolCallError on a failed call': {
          code: 'try { await tools.fail({}) } catch (e) { return [e instanceof ToolCallError, e instanceof Error, e.name, e.toolName, e.message, e.code] }',
          result: [true, true, 'ToolCallError', 'fail', 'the disk is full', 'E_FULL'],
        },
        'reject with ToolCallError when the host call throws': {
          code: 'try { await tools.throws({}) } catch (e) { return [e.name, e.message] }',
          result: ['ToolCallError', 'the host bridge broke'],
        },
        'run concurrently under Promise.all': {
          code: 'return await Promise.all([1, 2, 3].map((n) => tools.echo({ n })))',
          result: [{ n: 1 }, { n: 2 }, { n: 3 }],
        },
        'expose no unknown tool': { code: 'await tools.nope({})', fails: ['exception', /TypeError/] },
      })

      // at the site the call carries: under Promise.all, and for a call awaited after another, the call, not the await
      test('locate a failed call where the program made it, wherever it is awaited', async () => {
        const stackLine = `catch (e) { at.push(e.stack.split('\\n')[1].trim()) }`
        const code = [
          'const at = []',
          `try { await tools.fail({}) } ${stackLine}`,
          `try {\n  await (\n    tools\n      .fail({}))\n} ${stackLine}`,
          `try { await Promise.all([tools.echo({}), tools.fail({})]) } ${stackLine}`,
          `const helper = async () => { try { return await tools.fail({}) } ${stackLine} }`,
          'await helper()',
          'const later = tools.fail({})',
          'await tools.echo({})',
          `try { await later } ${stackLine}`,
          'return at',
        ].join('\n')
        expectOk(await run(code), ['at program.js:2:19', 'at program.js:6:8', 'at program.js:8:48', 'at program.js:9:55', 'at program.js:11:21'])
      })

      test('reject only the call whose argument is not JSON', async () => {
        const code = `
          const results = []
          const cycle = {}
          cycle.self = cycle
          const sparse = [1, , 3]
          const bad = [{ content: 1n }, { a: undefined }, { f() {} }, [Symbol('s')], { cycle }, { sparse }, { n: NaN }, { m: new Map() },
            { get boom() { throw new Error('no') } }, { d: new Date(0) }, new (class Point {})(), Infinity]
          for (const argument of bad) {
            try { await tools.echo(argument); results.push('sent') } catch (e) { results.push(e.name + ': ' + e.message) }
          }
          results.push(await tools.echo({ fine: true }))
          return results`
        const outcome = expectOk(await run(code))
        const results = JSON.parse(outcome.result!)
        expect(results.pop()).to.deep.equal({ fine: true })
        expect(results).to.have.length(12)
        for (const message of results) expect(message).to.match(/^TypeError: tools\.echo: argument \$/)
        expect(results[0]).to.equal('TypeError: tools.echo: argument $.content is a BigInt, which is not JSON; pass a string or number')
        expect(results[4]).to.match(/\$\.cycle\.self refers back to \$\.cycle/)
        expect(results[5]).to.match(/\$\.sparse\[1\] is a hole/)
        expect(results[8]).to.match(/\$\.boom could not be read/)
        expect(calls.map((c) => c.json)).to.deep.equal(['{"fine":true}'])
      })

      test("bound a value's nesting at MAX_JSON_DEPTH, the same on every backend and thread: refuse a deeper argument or return value, take one that deep", async () => {
        // a program may run on another thread after a call, with another stack (the isolate's process tier once drove it from
        // the sandbox process's main thread): the stack must not set the bound
        const nest = 'const nest = (n) => { let o = null; for (let i = 0; i < n; i++) o = { o }; return o }'
        const code = `${nest}
          const out = []
          try { await tools.echo(nest(257)) } catch (e) { out.push(e.name, e.code, e.message) }
          try { await tools.echo(nest(100000)) } catch (e) { out.push(e.message) }
          const back = await tools.echo(nest(256))
          let depth = 0
          for (let v = back; v !== null; v = v.o) depth++
          out.push(depth)
          return out`
        const deeper = 'tools.echo was not called: its argument is nested deeper than 256 levels, which is more than a tool call takes; pass a flatter value'
        expectOk(await run(code, { limits: { cpuMs: 5000, wallMs: 10000 } }), ['ToolCallError', 'INVALID_ARGUMENTS', deeper, deeper, 256])
        expect(calls.map((c) => c.json)).to.deep.equal([`${'{"o":'.repeat(256)}null${'}'.repeat(256)}`])
        for (const depth of [257, 100000]) {
          const outcome = await run(`${nest}\nawait tools.echo({})\nreturn nest(${depth})`, { limits: { cpuMs: 5000, wallMs: 10000 } })
          expectFailure(outcome, 'exception', /the return value is nested deeper than 256 levels, which is more than a result takes; return a flatter value/)
        }
      })

      test('send arguments as they are and match each reply to its call when the program put setters on prototypes', async () => {
        // the prelude's bookkeeping (pending calls, an argument's walk) must never write through a setter the program defined: it could drop the value
        const code = `
          let hits = 0
          const trap = { __proto__: null, set() { hits++ }, get() { return 'hijacked' }, configurable: true }
          const keys = ['0', '1', '2', '3', '4', 'value', 'step', 'up', 'depth', 'resolve', 'reject', 'name', 'size', 'get', 'writable']
          for (const key of keys) {
            Object.defineProperty(Array.prototype, key, trap)
            Object.defineProperty(Object.prototype, key, trap)
          }
          Object.defineProperty(Object.prototype, 'length', trap)
          const sent = { list: [1, [2, 3], { x: 'y' }], nested: { deep: { er: [true, null, -0, 1.5] } } }
          const first = await tools.echo(sent)
          const both = await Promise.all([tools.echo({ n: 1 }), tools.echo({ n: 2 }), tools['a-b']()])
          let failed
          try { await tools.fail({ at: [0] }) } catch (e) { failed = e.code }
          return { first, both, failed, hits }`
        const first = { list: [1, [2, 3], { x: 'y' }], nested: { deep: { er: [true, null, 0, 1.5] } } }
        expectOk(await run(code), { first, both: [{ n: 1 }, { n: 2 }, 'a-b'], failed: 'E_FULL', hits: 0 })
        expect(calls.map((c) => c.json)).to.deep.equal([JSON.stringify(first), '{"n":1}', '{"n":2}', '{}', '{"at":[0]}'])
      })

      test('read each getter of an argument once, and send what it answered', async () => {
        const code = `
          let reads = 0
          const argument = { get n() { return ++reads }, list: [{ get m() { return ++reads * 10 } }] }
          const reply = await tools.echo(argument)
          return { reply, reads }`
        expectOk(await run(code), { reply: { n: 1, list: [{ m: 20 }] }, reads: 2 })
      })

      test('print and return text outside ASCII when the program replaced String.prototype.charCodeAt', async () => {
        const code = `String.prototype.charCodeAt = () => { throw new Error('replaced') }
console.log('h\\u00e9llo \\u2603 \\ud83d\\ude00')
return 'r\\u00e9sult \\u2603'`
        const outcome = expectOk(await run(code), 'résult ☃')
        expect(outcome.logs).to.deep.equal(['héllo ☃ 😀'])
      })

      test('refuse calls made after the program finished', async () => {
        const code = `
          ;(async () => {
            for (let i = 0; i < 20; i++) await null
            tools.echo({ late: true }).catch(() => {})
          })()
          tools.never({})
          return 1`
        expectOk(await run(code), 1)
        await sleep(50)
        expect(calls.map((c) => c.name)).to.deep.equal(['never'])
      })
    })

    group('time', () =>
      cases({
        'stops a spin before the first await (cpu)': { code: 'while (true) {}', fails: ['timeout', /CPU/] },
        'stops a spin after an await (cpu)': { code: 'await tools.echo({})\nwhile (true) {}', fails: ['timeout', /CPU/] },
        'does not count time spent awaiting the host as cpu': { code: 'return await tools.slow({ ms: 300 })', result: 'slept' },
        'stops a program that waits past the wall-clock budget': { code: 'await tools.never({})', fails: ['timeout', /wall-clock/] },
        'stops a microtask loop that outlives the return': { code: 'const loop = () => Promise.resolve().then(loop)\nloop()\nreturn 1', fails: ['timeout'] },
      }),
    )

    group('memory', () => {
      // garbage collection near the limit is slow on a loaded machine: time is not what these tests are about
      const limits = { cpuMs: 5000, wallMs: 5000 }

      cases({
        'stops endless allocation': { code: 'const keep = []\nwhile (true) keep.push(new Array(1e5).fill(1.5))', fails: ['memory'], limits },
        'stops endless allocation after an await': {
          code: 'await tools.echo({})\nconst keep = []\nwhile (true) keep.push(new Array(1e5).fill(1.5))',
          fails: ['memory'],
          limits,
        },
        'stops endless array buffer allocation': { code: 'const keep = []\nwhile (true) keep.push(new Uint8Array(1 << 20))', fails: ['memory'], limits },
        'refuses a tool result larger than a quarter of memoryMb': {
          code: 'try { await tools.huge({}) } catch (e) { return [e.name, e.message] }',
          result: ['ToolCallError', `the result of huge is larger than ${(32 * 1024 * 1024) / 4} bytes (a quarter of memoryMb); ask for less at a time`],
          limits,
        },
        'turns deep recursion into an exception': { code: 'const f = (n) => f(n + 1) + 1\nf(0)', fails: ['exception', /RangeError/], limits },
      })

      test('ends a run whose tool argument is larger than a quarter of memoryMb, before the host sees it', async () => {
        const outcome = expectFailure(await run('await tools.echo({ s: "x".repeat(9e6) })', { limits }), 'memory', /tool argument was larger than/)
        expect(outcome.message).to.match(/pass less data/)
        expect(calls).to.deep.equal([])
      })

      test('holds the calls beyond the 1024 waiting inside the sandbox and starts them as earlier ones settle', async () => {
        // the 1025th call at once was once refused (`1024 tool calls are already waiting`): a fan-out over thousands of files failed
        const code = 'const r = await Promise.all(Array.from({ length: 3000 }, (_, i) => tools.later({ i })))\nreturn r.every((v, i) => v.i === i) && r.length'
        // 3,000 calls is a burst of work, not a spin: the budget is the default's, not the hazard's
        expectOk(await run(code, { limits: { cpuMs: 5000, wallMs: 5000 } }), 3000)
        expect(calls).to.have.length(3000)
        expect(calls.map((call) => JSON.parse(call.json).i)).to.deep.equal(Array.from({ length: 3000 }, (_, i) => i))
        expect(peakLater).to.be.within(1, 1024)
      })

      test('gives a program its full memoryMb on a sandbox that served many runs', async () => {
        for (let i = 0; i < 30; i++) expectOk(await run('const a = new Array(1e5).fill(i => i); return 1'))
        // three quarters of the 32 MB as live doubles
        expectOk(await run('const keep = []\nfor (let i = 0; i < 24; i++) keep.push(new Float64Array(131072).fill(i))\nreturn keep.length', { limits }), 24)
      })
    })

    group('output', () => {
      test('stops a flood of console output', async () => {
        const outcome = expectFailure(await run('while (true) console.log("flood")'), 'output-limit')
        expect(outcome.logs.join('').length).to.be.at.most(hazardLimits.outputBytes)
      })

      test('counts the result against the budget', async () => {
        expectFailure(await run('return "x".repeat(5000)'), 'output-limit')
      })

      test('stops a huge result without measuring it', async () => {
        expectFailure(await run('return ["x".repeat(3e7)]', { limits: { memoryMb: 128, cpuMs: 5000, wallMs: 5000 } }), 'output-limit')
        expectFailure(await run('return { a: Array.from({ length: 1e5 }, (_, i) => ({ i })) }', { limits: { cpuMs: 5000, wallMs: 5000 } }), 'output-limit')
      })

      test('stops a huge log line without building it', async () => {
        expectFailure(await run('console.log({ a: ["x".repeat(3e7)] })', { limits: { memoryMb: 128, cpuMs: 5000, wallMs: 5000 } }), 'output-limit')
        const nested = 'const wide = (d) => d === 0 ? "abcdefgh" : Array.from({ length: 100 }, () => wide(d - 1))\nconsole.log(wide(3))'
        expectFailure(await run(nested, { limits: { cpuMs: 5000, wallMs: 5000 } }), 'output-limit')
      })

      test('shows a huge error message only by its length', async () => {
        const outcome = expectFailure(await run('throw new Error("x".repeat(3e6))'), 'exception')
        expect(outcome.message).to.equal('Error: (3000000 characters, too long to show)')
        const cut = expectFailure(await run('throw new Error("y".repeat(5000))'), 'exception')
        expect(cut.message).to.match(/^Error: y{2000}… \(5000 characters\)/)
      })
    })

    group('abort', () => {
      test('ends a run that is awaiting the host', async () => {
        const controller = new AbortController()
        setTimeout(() => controller.abort(), 20)
        expectFailure(await run('await tools.never({})', { signal: controller.signal }), 'abort')
      })

      test('ends a spinning run promptly', async () => {
        const controller = new AbortController()
        const limits = { cpuMs: 5000, wallMs: 5000 }
        let abortedAt = 0
        setTimeout(() => {
          abortedAt = performance.now()
          controller.abort()
        }, 30)
        expectFailure(await run('while (true) {}', { signal: controller.signal, limits }), 'abort')
        expect(performance.now() - abortedAt).to.be.below(500)
      })

      test('ends a run aborted while it is being admitted (a microtask or a few after run())', async () => {
        // the run awaits its place and its unit in between: an abort there must not be lost until wallMs
        for (let depth = 0; depth < 6; depth++) {
          const controller = new AbortController()
          const outcome = run('await tools.never({})', { signal: controller.signal })
          let left = depth
          const tick = () => (left-- > 0 ? queueMicrotask(tick) : controller.abort())
          tick()
          expectFailure(await outcome, 'abort')
        }
      })

      test('does not start an aborted run', async () => {
        expectFailure(await run('return 1', { signal: AbortSignal.abort() }), 'abort')
        expect(calls).to.deep.equal([])
      })
    })

    group('escapes', () => {
      const escapes: Record<string, string> = {
        'this.constructor': 'return this.constructor.constructor("return process")()',
        'globalThis.constructor': 'return globalThis.constructor.constructor("return process")()',
        'tools.constructor': 'return tools.constructor.constructor("return process")()',
        'a binding': 'return tools.echo.constructor.constructor("return process")()',
        "a binding's result": 'const r = await tools.echo({ a: [] })\nreturn r.a.constructor.constructor("return process")()',
        'a thrown tool error': 'try { await tools.fail({}) } catch (err) { return err.constructor.constructor("return process")() }',
        'a host bridge error': 'try { await tools.throws({}) } catch (err) { return err.constructor.constructor("return process")() }',
        console: 'return console.log.constructor.constructor("return process")()',
        'import()': 'return await import("node:fs")',
        'import() from eval': 'return await eval("import(\'node:fs\')")',
        'import() error': 'try { await import("node:fs") } catch (e) { return e.constructor.constructor("return process")() }',
        require: 'return require',
        process: 'return process',
        'globalThis.process': 'return globalThis.process ?? globalThis.require ?? globalThis.Buffer',
        'Function("return this")': 'const g = Function("return this")()\nreturn g.process ?? g.require',
        'arguments.callee.caller': `
          let f = arguments.callee, found
          for (let i = 0; i < 10 && f; i++) { try { found = f.constructor.constructor('return process')() } catch {} ; try { f = f.caller } catch { f = null } }
          return found`,
        'Error.prepareStackTrace': `${reach}
          let found
          Error.prepareStackTrace = (error, frames) => {
            for (const frame of frames) found ??= reach([frame.getThis?.(), frame.getFunction?.()])
            return 'stack'
          }
          await tools.echo({ get x() { new Error('probe').stack; return 1 } })
          try { await tools.echo({ get x() { throw new Error('probe') } }) } catch (e) { e.stack }
          try { await tools.fail({}) } catch (e) { e.stack }
          try { await import('node:fs') } catch (e) { e.stack }
          return found`,
        'a stack overflow at the bridge': `${reach}
          const caught = []
          const dive = () => {
            try { dive() } catch (e) {
              try { tools.echo({}).catch((err) => caught.push(err)) } catch (err) { caught.push(err) }
              try { console.log('x') } catch (err) { caught.push(err) }
            }
          }
          dive()
          for (let i = 0; i < 10; i++) await null
          return reach(caught)`,
        'replaced Function.prototype methods': `${reach}
          const seen = []
          const { call, apply, bind } = Function.prototype
          Function.prototype.call = function (...args) { seen.push(this, ...args); return apply.bind(this)(args[0], args.slice(1)) }
          Function.prototype.apply = function (self, args) { seen.push(this, self, ...(args || [])); return call.bind(this)(self, ...(args || [])) }
          Reflect.apply = (f, self, args) => { seen.push(f, self, ...args); return call.bind(f)(self, ...args) }
          Promise.prototype.then = ((then) => function (a, b) { seen.push(this, a, b); return then.call(this, a, b) })(Promise.prototype.then)
          Object.defineProperty(Object.prototype, 'then', { get() { seen.push(this); return undefined }, configurable: true })
          console.log({ a: 1 })
          await tools.echo({ a: 1 })
          try { await tools.fail({}) } catch {}
          return reach(seen)`,
      }
      for (const [title, body] of Object.entries(escapes)) {
        test(`reach no Node API through ${title}`, async () => {
          const outcome = await run(probe(body))
          expectContained(outcome)
          if (outcome.ok) expect(outcome.result).to.match(/^"(blocked|contained)/)
        })
      }

      // the way out of the program's realm is a function of another realm (the worker's, which has process; the isolate
      // driver's context, one per isolate, which every later run enters): a stack overflow raised exactly as that
      // function is entered is an error of its realm, whose Function must never reach the program
      test('hand a program that overflows its stack at the way out only errors of its own realm', async () => {
        // the 600 deepest frames of the dive log (the 300 deepest call a tool too) as the overflow unwinds them, one frame
        // less deep each time: one of them overflows exactly as the other realm is entered; the deepest cannot log at all
        const code = `
          await tools.echo({})
          const caught = []
          let tries = 0
          const dive = () => {
            try {
              dive()
            } catch (e) {
              if (tries++ < 600) {
                try { console.log('x') } catch (err) { caught.push(err) }
                if (tries < 300) try { tools.echo({ a: 1 }).catch((err) => caught.push(err)) } catch (err) { caught.push(err) }
              }
              throw e
            }
          }
          try { dive() } catch {}
          for (let i = 0; i < 10; i++) await null
          return [caught.length > 0, caught.filter((e) => !(e instanceof Error)).length]`
        const outcome = expectOk(await run(code, { limits: { ...roomy, outputBytes: 64 * 1024 } }), [true, 0])
        expect(outcome.logs).not.to.be.empty
        // an overflow inside the way out may leave the sandbox's own state half changed: later runs are served whole
        // (the worker's count of messages sent and its spin once hung the next run with a call on that unit)
        for (let i = 0; i < 4; i++) expectOk(await run('return (await tools.echo({ a: 1 })).a'), 1)
      })

      test('offer only standard globals', async () => {
        const outcome = expectOk(await run('return Object.getOwnPropertyNames(globalThis)'))
        const names: string[] = JSON.parse(outcome.result!)
        // FinalizationRegistry would let a program's code run after the run, whenever the engine collects garbage
        const late = ['FinalizationRegistry', 'setTimeout', 'setInterval', 'setImmediate', 'queueMicrotask']
        for (const name of ['process', 'require', 'module', 'Buffer', 'fetch', 'SharedArrayBuffer', 'WebAssembly', 'Atomics', ...late]) {
          expect(names).not.to.include(name)
        }
        expect(names).to.include('ToolCallError')
      })

      test('keep prototype pollution inside the run', async () => {
        const code = 'Object.prototype.polluted = "yes"\nArray.prototype.map = () => "mapped"\nJSON.parse = () => "parsed"\nreturn await tools.echo({ a: 1 })'
        expectOk(await run(code))
        expectOk(await run('return [({}).polluted ?? null, [1].map((x) => x)]'), [null, [1]])
      })

      test('give the next run a fresh context, the one made ahead for it while the unit waited included', async () => {
        expectOk(await run('globalThis.left = 1\nObject.prototype.polluted = "yes"\nreturn await tools.echo({ a: 1 })'))
        // time for the unit to make the next run's context before it comes
        await new Promise((resolve) => setTimeout(resolve, 100))
        expectOk(await run('return [typeof left, ({}).polluted ?? null, Object.keys(globalThis).length]'), ['undefined', null, 0])
      })
    })
  })
}

const none: CodeRunRequest['call'] = async () => ({ ok: false, message: 'none' })
const echo = async (_: string, json: string): Promise<BridgeReply> => ({ ok: true, value: json })
/** for runs whose outcome a test asserts, not their budgets: a loaded machine must not end them first */
export const roomy = { ...hazardLimits, cpuMs: 10000, wallMs: 20000 }
/** a run of `code` that may call no tool, under the sandbox's own limits, unless `more` says otherwise */
export const request = (code: string, more: Partial<CodeRunRequest> = {}) => ({ code, tools: [], call: none, signal: new AbortController().signal, ...more })
const echoing = { tools: ['echo'], call: echo, limits: roomy }

/** the pool and plugin behaviour every backend shares: `makePool(poolSize)` and its `SandboxService` subclass */
export function describePool(
  name: string,
  makePool: (poolSize: number, maxConcurrent?: number) => Pool,
  Service: new (ctx: Context, config?: SandboxService.ConfigInput) => SandboxService,
) {
  describe(`${name}: pool`, () => {
    // the pools a test made through `pool`, closed after it
    const made: Pool[] = []
    const pool = (poolSize: number, maxConcurrent?: number) => made[made.push(makePool(poolSize, maxConcurrent)) - 1]
    afterEach(() => Promise.all(made.splice(0).map((sandbox) => sandbox.close())))

    it('starts warming at construction and serves from the warm pool once ready', async () => {
      const sandbox = pool(1)
      await sandbox.ready()
      expect(await sandbox.run(request('return await tools.echo(1)', echoing))).to.deep.include({ ok: true, result: '1' })
    })

    it('closes while still warming: ready() settles and no run starts', async () => {
      const sandbox = makePool(2)
      await sandbox.close()
      await sandbox.ready()
      expect((await sandbox.run(request('return 1'))).ok).to.equal(false)
    })

    it('ends a run waiting for the unit being warmed with abort, not crash, when the sandbox closes', async () => {
      const sandbox = makePool(1)
      const outcome = sandbox.run(request('return 1'))
      await sandbox.close()
      expect(await outcome).to.deep.include({ ok: false, kind: 'abort' })
    })

    it('serves overlapping runs beyond the pool size', async () => {
      const sandbox = pool(1)
      const runs = [1, 2, 3].map((n) => sandbox.run(request(`return await tools.echo(${n})`, echoing)))
      expect((await Promise.all(runs)).map((outcome) => outcome.ok && outcome.result)).to.deep.equal(['1', '2', '3'])
    })

    it('runs with a memory limit other than the pool’s', async () => {
      const outcome = await pool(1).run(request('return 1', { limits: { ...roomy, memoryMb: 48 } }))
      expect(outcome).to.deep.equal({ ok: true, logs: [], result: '1' })
    })

    it('caps the programs running at once, queues the rest in order and drops a queued run that is aborted', async () => {
      const sandbox = pool(1, 2)
      const started: string[] = []
      const waiting: (() => void)[] = []
      const call = async (_: string, json: string): Promise<BridgeReply> => {
        started.push(json)
        await new Promise<void>((resolve) => waiting.push(resolve))
        return { ok: true, value: json }
      }
      const controller = new AbortController()
      const run = (n: number, signal = new AbortController().signal) =>
        sandbox.run(request(`return await tools.hold(${n})`, { tools: ['hold'], call, limits: roomy, signal }))
      const runs = [run(1), run(2), run(3, controller.signal), run(4)]
      while (started.length < 2) await sleep(5)
      expect(sandbox.load()).to.include({ running: 2, queued: 2, maxConcurrent: 2 })
      controller.abort()
      expect(await runs[2]).to.include({ ok: false, kind: 'abort' })
      expect(sandbox.load()).to.include({ running: 2, queued: 1 })
      for (let next = 0; next < 3; next++) {
        while (waiting.length <= next) await sleep(5)
        waiting[next]()
      }
      const outcomes = await Promise.all([runs[0], runs[1], runs[3]])
      expect(outcomes.map((outcome) => outcome.ok && outcome.result)).to.deep.equal(['1', '2', '4'])
      expect([...started.slice(0, 2)].sort().concat(started.slice(2))).to.deep.equal(['1', '2', '4'])
      expect(sandbox.load()).to.include({ running: 0, queued: 0, peakRunning: 2, peakQueued: 2 })
    })

    it('ends runs in progress on close', async () => {
      const sandbox = makePool(1)
      let started!: () => void
      const waiting = new Promise<void>((resolve) => (started = resolve))
      const call = () => {
        started()
        return new Promise<BridgeReply>(() => {})
      }
      const outcome = sandbox.run(request('await tools.wait({})', { tools: ['wait'], call, limits: roomy }))
      await waiting
      await sandbox.close()
      expect(await outcome).to.include({ ok: false, kind: 'abort' })
    })
  })

  describe(`${name}: plugin`, () => {
    it('provides ctx.codeRuntime and closes it on dispose', async () => {
      const ctx = new Context()
      const fork = ctx.plugin(Service, { poolSize: 1, limits: { memoryMb: 32 } })
      await ctx.start()
      expect(ctx.codeRuntime.backend).to.equal(name)
      expect(await ctx.codeRuntime.run(request('return 40 + 2', { limits: roomy }))).to.deep.equal({ ok: true, logs: [], result: '42' })
      fork.dispose()
      expect(ctx.get('codeRuntime')).to.equal(undefined)
    })
  })
}
