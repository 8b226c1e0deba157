// the tiers a deployment can choose (the worker and isolate backends, in-process and in a sandbox process, and QuickJS in
// WebAssembly) give a hostile program the same outcome, but where QuickJS is known to differ (quickjsTells). each tier's
// own suites allow some latitude (a message that names a bound or the stack); this spec holds them to one another, which is what a model sees when a deployment changes its tier. a value's
// nesting once was bounded by the stack of whatever thread ran the step, and the isolate's process tier, which then drove a
// program from the sandbox process's main thread after a tool call (since removed), failed values the others passed

import { type CodeRunLimits, type CodeRunOutcome, ProcessSandbox, WorkerSandbox, workerBackend } from '@faber/sandbox'
import { IsolateSandbox, isolateBackend } from '@faber/sandbox-isolate'
import { QuickJsSandbox } from '@faber/sandbox-quickjs'
import { expect } from 'chai'

const limits: CodeRunLimits = { cpuMs: 300, wallMs: 5000, memoryMb: 32, outputBytes: 1 << 14 }
const call = async (name: string, json: string) => (name === 'fail' ? { ok: false as const, message: 'nope', code: 'E_X' } : { ok: true as const, value: json })

const nest = 'const nest = (n) => { let o = null; for (let i = 0; i < n; i++) o = { o }; return o };'
// each program once as it is and once after a tool call (replies entering it, and once another thread's stack)
const programs: Record<string, [code: string, kind: string, cpuMs?: number]> = {
  'a recursion 5,000 deep': ['const f = (n) => n === 0 ? 0 : 1 + f(n - 1); return f(5000)', 'ok'],
  'a recursion that overflows the stack': ['const f = (n) => n === 0 ? 0 : 1 + f(n - 1); return f(1e6)', 'exception'],
  'a call made from 2,000 frames down': ['const f = async (n) => n === 0 ? await tools.echo({ a: [1, { b: 2 }] }) : f(n - 1); return await f(2000)', 'ok'],
  'an argument 256 deep': [`${nest} let d = 0; for (let v = await tools.echo(nest(256)); v !== null; v = v.o) d++; return d`, 'ok'],
  'an argument 5,000 deep': [`${nest} return await tools.echo(nest(5000))`, 'exception'],
  'a return value 5,000 deep': [`${nest} return nest(5000)`, 'exception'],
  'a string past outputBytes': ['return "x".repeat(20000)', 'output-limit'],
  'a flood of logs': ['for (let i = 0; i < 1e5; i++) console.log("line", i); return 1', 'output-limit'],
  'a loop that never ends': ['while (true) {}', 'timeout'],
  // the memory must run out first, so the cpu budget only backs it up: the worker tier counts its thread's busy wall time
  // (event loop utilization) as cpu, which a loaded machine stretches (at load 12-19, 3 runs in 6 ran out of 300 ms)
  'an allocation that never ends': ['const a = []; for (;;) a.push(new Array(1e5).fill(1))', 'memory', 4000],
  'a failed call, uncaught': ['await tools.fail({})', 'exception'],
  'a failed call, caught': ['try { await tools.fail({}) } catch (e) { return [e.name, e.code, e.message, e.toolName] }', 'ok'],
  // isolated-vm ends the task that left a rejection unhandled with it: the isolate's tiers failed these (as an exception
  // on the process tier, and before the first call in process); the worker and QuickJS ignore such rejections
  'a failed call awaited after another call': ['const p = tools.fail({})\nawait tools.echo({})\ntry { await p } catch (e) { return e.message }', 'ok'],
  'a rejection left unhandled': ['Promise.reject(new Error("left"))\nawait tools.echo({})\nreturn 1', 'ok'],
  'a name that is not a tool': ['return await tools.ech({})', 'exception'],
  'a function returned': ['return () => 1', 'exception'],
  'a BigInt argument': ['await tools.echo({ n: 1n })', 'exception'],
  'a cycle in an argument': ['const a = {}; a.a = a; await tools.echo(a)', 'exception'],
  // past the 1024 calls the host takes at once, the rest wait in the sandbox: none is refused. a burst of work, not a
  // spin: the default cpu budget
  'more calls at once than the host takes': ['return (await Promise.all(Array.from({ length: 1100 }, (_, i) => tools.echo({ i })))).length', 'ok', 5000],
  'a thrown string': ['throw "plain"', 'exception'],
  // the prelude reads where it threw with no list destructured: the program's iterator threw there, and the run was
  // told nothing until wallMs (a timeout)
  'an Array iterator of its own that throws, then a throw': ['Array.prototype[Symbol.iterator] = () => { throw new Error("mine") }\nthrow "x"', 'exception'],
  'a Proxy argument whose traps throw': [
    'const p = new Proxy({}, { get() { throw new Error("get") }, ownKeys() { throw new Error("keys") }, getPrototypeOf() { throw new Error("proto") } }); return await tools.echo(p)',
    'exception',
  ],
  'odd keys after polluting Object.prototype': [
    'Object.prototype.polluted = 1; globalThis.left = 1; return [await tools.echo({ ["__proto__"]: 1, "": 2, constructor: 3 }), typeof left]',
    'ok',
  ],
  'a getter of an argument that calls a tool': ['return await tools.echo({ get a() { tools.echo({ inner: 1 }); return 1 } })', 'ok'],
  'a log of a value whose getter throws': ['console.log({ get x() { throw new Error("no") } }); console.log([1, { a: [2, { b: 3 }] }]); return 1', 'ok'],
  'Error.stackTraceLimit and prepareStackTrace of its own, kept across calls': [
    'Error.stackTraceLimit = 3; await tools.echo({}); const before = "prepareStackTrace" in Error; Error.prepareStackTrace = () => "mine"; await tools.echo({}); return [Error.stackTraceLimit, before, new Error().stack]',
    'ok',
  ],
  'an argument of 5,000 keys': ['const o = {}; for (let i = 0; i < 5000; i++) o["k" + i] = i; return Object.keys(await tools.echo(o)).length', 'ok'],
  // a stack of its own naming a line past any number (Infinity, once read): the worker in-process had line Infinity, which
  // the process tier's json channel turned into no line at all; one too long for a safe integer was told as it was
  'an error whose own stack names an impossible line': [
    `const e = new Error("x"); e.stack = "Error: x\\n    at program.js:${'9'.repeat(400)}:3"; throw e`,
    'exception',
  ],
  'an error whose own stack names an unsafe column': [
    'const e = new Error("x"); e.stack = "Error: x\\n    at program.js:2:99999999999999999999"; throw e',
    'exception',
  ],
}

// where QuickJS (@faber/sandbox-quickjs, no V8) tells a program something else, and why (its README says so too). there its
// outcome must still be of the program's kind; where it computes slower, a timeout is allowed too: the same cpuMs buys
// QuickJS's interpreter less work than V8's compiled code
const quickjsTells: Record<string, string> = {
  'a recursion that overflows the stack': 'another column: QuickJS places the error at the start of the call',
  'an argument 5,000 deep': 'slower, and another column',
  'a flood of logs': 'slower: it may run out of cpuMs before outputBytes',
  'an allocation that never ends': 'slower: its collector may run out of cpuMs before the memory fills',
  'a name that is not a tool': "QuickJS says only 'not a function', so no nearest names are offered",
  'a cycle in an argument': 'another column',
  'a Proxy argument whose traps throw': 'another column',
  'Error.stackTraceLimit and prepareStackTrace of its own, kept across calls': "QuickJS's Error has no prepareStackTrace until a program sets one",
}
const slower = (name: string) => /^slower/.test(quickjsTells[name] ?? '')

interface Tier {
  run(request: Parameters<WorkerSandbox['run']>[0]): Promise<CodeRunOutcome>
  ready?(): Promise<void>
  close(): Promise<void>
}
const tiers: [string, () => Tier][] = [
  ['worker, in-process', () => new WorkerSandbox({ limits })],
  ['isolate, in-process', () => new IsolateSandbox({ limits })],
  ['quickjs, in-process', () => new QuickJsSandbox({ limits })],
  ['worker, process tier', () => new ProcessSandbox({ limits, backend: workerBackend })],
  ['isolate, process tier', () => new ProcessSandbox({ limits, backend: isolateBackend })],
]

// what a model is told: the kind, the message, the result, how many lines were logged
const told = (outcome: CodeRunOutcome) =>
  outcome.ok
    ? `ok: ${outcome.result} (${outcome.logs.length} lines logged)`
    : `${outcome.kind}: ${outcome.message} (${outcome.logs.length} lines logged${'line' in outcome ? `, at ${outcome.line}:${outcome.column}` : ''})`

describe('the tiers agree on what a hostile program is told', function () {
  this.timeout(120_000)
  const seen: Record<string, Record<string, string>> = {}

  before(async () => {
    for (const [tier, make] of tiers) {
      const sandbox = make()
      try {
        await sandbox.ready?.()
        for (const [name, [code, , cpuMs = limits.cpuMs]] of Object.entries(programs)) {
          for (const [variant, text] of [
            ['', code],
            [', after a tool call', `await tools.echo({});\n${code}`],
          ]) {
            const outcome = await sandbox.run({ code: text, tools: ['echo', 'fail'], call, signal: new AbortController().signal, limits: { ...limits, cpuMs } })
            ;(seen[`${name}${variant}`] ??= {})[tier] = told(outcome)
          }
        }
      } finally {
        await sandbox.close()
      }
    }
  })

  for (const [name, [, kind]] of Object.entries(programs)) {
    for (const variant of ['', ', after a tool call']) {
      it(`${name}${variant}: ${kind} on every tier, told alike`, () => {
        const byTier = seen[`${name}${variant}`]
        expect(Object.keys(byTier)).to.have.length(tiers.length)
        const first = Object.values(byTier)[0]
        expect(first.startsWith(`${kind}:`), first).to.equal(true)
        for (const [tier, text] of Object.entries(byTier)) {
          if (!(tier.startsWith('quickjs') && name in quickjsTells)) expect(text, tier).to.equal(first)
          else if (!(slower(name) && text.startsWith('timeout:'))) expect(text.startsWith(`${kind}:`), `${tier}: ${text}`).to.equal(true)
        }
      })
    }
  }
})

describe('the tiers agree on where each call was made', function () {
  this.timeout(60_000)
  // the lines and columns of the program as written: a call awaited at once, calls in a map's callback, through a
  // helper, split over lines, after a comment that names a tool, by a computed name, from an argument's getter, and by
  // a builtin (at the program's call of the builtin)
  const program = [
    'await tools.echo({ n: 1 })',
    'await Promise.all([2, 3].map((n) => tools.echo({ n })))',
    'const helper = (n) => tools.echo({ n })',
    'await helper(4)',
    'await tools',
    '  .echo({ n: 5 })',
    ';[6].forEach(tools.echo)',
    "/* tools.echo */ await   tools.echo({ n: 7 }); await tools['echo']({ n: 8 })",
    'return await tools.echo({ get n() { tools.echo({ n: 9 }); return 10 } })',
  ].join('\n')
  const expected = ['1@1:13', '2@2:43', '3@2:43', '4@3:29', '5@6:4', '6@7:6', '7@8:32', '8@8:67', '9@9:43', '10@9:20']
  // QuickJS places a call by a computed name at its callee (`tools['echo']`), V8 at its arguments; and a builtin's call
  // at its arguments, V8 at the method's name (`forEach`)
  const quickjs: Record<string, string> = { '8@8:67': '8@8:54', '6@7:6': '6@7:14' }
  const expectedOn = (tier: string) => (tier.startsWith('quickjs') ? expected.map((site) => quickjs[site] ?? site) : expected)

  for (const [tier, make] of tiers) {
    it(`${tier}: each call's line and column`, async () => {
      const sandbox = make()
      try {
        await sandbox.ready?.()
        for (const [variant, lines] of [
          ['', 0],
          ['await tools.echo({ n: 0 })\n', 1],
        ] as const) {
          const sites: string[] = []
          const record = async (_: string, json: string, site?: { line: number; column: number }) => {
            const n = JSON.parse(json)
            sites.push(`${typeof n === 'number' ? n : n.n}@${site?.line}:${site?.column}`)
            return { ok: true as const, value: json }
          }
          const outcome = await sandbox.run({ code: variant + program, tools: ['echo'], call: record, signal: new AbortController().signal, limits })
          expect(outcome.ok, told(outcome)).to.equal(true)
          const shifted = expectedOn(tier).map((entry) => entry.replace(/@(\d+)/, (_, line) => `@${+line + lines}`))
          expect(sites).to.deep.equal(lines ? ['0@1:13', ...shifted] : shifted)
        }
      } finally {
        await sandbox.close()
      }
    })
  }
})
