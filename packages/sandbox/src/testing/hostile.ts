// the hostile-program suite: its programs run in child processes (hostile-child.ts, one per tier for the bombs and one
// for the leaks), so a program that takes its process down fails its tests and not mocha. the child is the host here:
// it must survive, print nothing but its reports, and be able to run the next program.

import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { extname } from 'node:path'
import { text } from 'node:stream/consumers'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'
import { after, before, describe, it } from 'mocha'
import type { Report } from './hostile-child.ts'

// from the workspace's sources (.ts) the hosts run through tsx; built and published (.js), on plain node
const ext = extname(fileURLToPath(import.meta.url))
const child = fileURLToPath(new URL(`./hostile-child${ext}`, import.meta.url))
const loader = ext === '.ts' ? ['--import', 'tsx/esm'] : []

/** where the suite's hosts find a backend: a module (its URL) exporting the backend's sandbox class and its ProcessBackend */
export interface HostileBackend {
  module: string
  /** the export that is a class taking PoolOptions (`WorkerSandbox`) */
  sandbox: string
  /** the export that is its process tier's ProcessBackend (`workerBackend`) */
  backend: string
}

// the three backends of this workspace, by name: from its sources, their sources (through the URL, not a literal path:
// the other backends depend on this package, so this one's build must not include them); published, their packages,
// found from the host's module as any import is
const sibling = (name: string) => (ext === '.ts' ? new URL(`../../../${name}/src/index.ts`, import.meta.url).href : `@faber/${name}`)
const known: Record<string, HostileBackend> = {
  'worker-vm': { module: new URL(`../index${ext}`, import.meta.url).href, sandbox: 'WorkerSandbox', backend: 'workerBackend' },
  'isolated-vm': { module: sibling('sandbox-isolate'), sandbox: 'IsolateSandbox', backend: 'isolateBackend' },
  'quickjs-wasm': { module: sibling('sandbox-quickjs'), sandbox: 'QuickJsSandbox', backend: 'quickJsBackend' },
}

interface Finished {
  code: number | null
  signal: string | null
  stdout: string
  stderr: string
}

async function host(backend: HostileBackend, isolation: string, programs: string[]): Promise<Finished> {
  const args = [child, JSON.stringify(backend), isolation, JSON.stringify(programs)]
  const proc = spawn(process.execPath, ['--no-node-snapshot', '--expose-gc', ...loader, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const [stdout, stderr, [code, signal]] = await Promise.all([text(proc.stdout), text(proc.stderr), once(proc, 'close')])
  return { code, signal, stdout, stderr }
}

// the report of program `index`: the host must have lived through it and written nothing but its reports
const report = (finished: Finished, index: number, title: string): Report => {
  const lines = finished.stdout.split('\n').filter(Boolean)
  const tail = finished.stderr.slice(-600)
  if (lines.length <= index) expect.fail(`the host died during "${title}" (${finished.signal ?? `exit code ${finished.code}`}): ${tail}`)
  expect(finished.stderr, 'the host wrote to stderr').to.equal('')
  return JSON.parse(lines[index])
}

// memory bombs: each must end as `memory` or `output-limit`, with the host up and its memory back where it was
export const bombs: Record<string, string> = {
  'an array of arrays': 'const keep = []\nwhile (true) keep.push(new Array(1e5).fill(1.5))',
  'a string doubled until it breaks': 'let s = "ab"\nwhile (true) { s += s; s.charCodeAt(s.length >> 1) }',
  'a Map of objects': 'const m = new Map()\nfor (let i = 0; ; i++) m.set(i, { i, pad: new Array(16).fill(i) })',
  'a Set of strings': 'const s = new Set()\nfor (let i = 0; ; i++) s.add(String(i).padEnd(200, "x"))',
  'array buffers': 'const keep = []\nwhile (true) keep.push(new ArrayBuffer(1 << 20))',
  'a JSON text of a huge array': 'return JSON.stringify(new Array(2e7).fill(1))',
  'a huge returned value': 'return ["x".repeat(2e7)]',
  'a huge log line': 'console.log({ line: "x".repeat(2e7) })',
  'huge nested-call arguments': 'await tools.echo({ data: "x".repeat(2e7) })',
  'many nested calls, each large': 'const big = "x".repeat(3e6)\nawait Promise.all(Array.from({ length: 50 }, () => tools.echo({ big })))',
}

// ways a program might reach the host's stdout or stderr, or leave work behind for later
export const leaks: Record<string, string> = {
  'the global console': 'globalThis.console?.log?.("FORGED"); globalThis.console?.error?.("FORGED"); return 1',
  'an unhandled rejection': 'Promise.reject(new Error("FORGED")); return 1',
  'an error thrown from a detached job': '(async () => { await null; throw new Error("FORGED") })(); return 1',
  'an error thrown after the run': 'const never = tools.echo({}).then(() => { throw new Error("FORGED") }); return 1',
  'a detached async generator':
    'async function* g() { while (true) yield await tools.echo({ n: 1 }) }\n(async () => { for await (const _ of g()) {} })()\nreturn 1',
  'a garbage-collection callback': 'try { new FinalizationRegistry(() => { throw new Error("FORGED") }).register({}, 1) } catch {}\nreturn 1',
  'a replaced stack formatter': 'Error.prepareStackTrace = () => { throw new Error("FORGED") }\nthrow new Error("x")',
}

/**
 * `bombsIn`: the tiers whose host must survive the memory bombs; in-process only for a backend whose memory limit holds
 * in the host's process (QuickJS's WebAssembly memory), never a V8 one's (a bomb V8 cannot contain ends the process).
 * `from`: where the hosts find a backend that is not one of this workspace's (`name` only titles the suite then)
 */
export function describeHostile(name: string, { bombsIn = ['process'], from }: { bombsIn?: string[]; from?: HostileBackend } = {}) {
  const backend = from ?? known[name]
  if (!backend) throw new Error(`describeHostile: ${name} is none of ${Object.keys(known).join(', ')}; say where it is with \`from\``)
  describe(`${name}: hostile programs, in host processes of their own`, function () {
    this.timeout(120000)
    // the bombs in one host per tier named; the leaks in one host per tier. started together, read per case
    const bombing = new Map<string, Promise<Finished>>()
    const leaking = new Map<string, Promise<Finished>>()
    before(() => {
      for (const isolation of bombsIn) bombing.set(isolation, host(backend, isolation, Object.values(bombs)))
      for (const isolation of ['in-process', 'process']) leaking.set(isolation, host(backend, isolation, Object.values(leaks)))
    })
    after(() => Promise.allSettled([...bombing.values(), ...leaking.values()]))

    for (const isolation of bombsIn)
      Object.keys(bombs).forEach((title, index) => {
        it(`survives ${title} (${isolation === 'process' ? 'process tier' : 'in process'})`, async () => {
          const { outcome, next, before, after } = report(await bombing.get(isolation)!, index, title)
          if (outcome.ok) expect.fail(`the bomb ran to completion: ${outcome.result}`)
          expect(outcome.kind, outcome.message).to.be.oneOf(['memory', 'output-limit'])
          expect(next).to.deep.equal({ ok: true, result: '[1,"undefined"]' })
          // the host keeps nothing of the bomb; the allocator may keep some pages it lent for the bridge's buffers
          expect(after.heap - before.heap, `host heap went from ${before.heap} to ${after.heap} MB`).to.be.below(16)
          expect(after.rss - before.rss, `host RSS went from ${before.rss} to ${after.rss} MB`).to.be.below(64)
        })
      })
    for (const isolation of ['in-process', 'process']) {
      it(`(${isolation}) keeps what a program prints or schedules off the host's streams and out of the next run`, async () => {
        const finished = await leaking.get(isolation)!
        Object.keys(leaks).forEach((title, index) => {
          const { outcome, next } = report(finished, index, title)
          expect(outcome.kind, title).not.to.be.oneOf(['crash', 'timeout'])
          expect(next, title).to.deep.equal({ ok: true, result: '[1,"undefined"]' })
        })
        expect(finished.code).to.equal(0)
      })
    }
  })
}
