// memory bombs made after a program's tool calls, on the in-process tier: the host must live through them, its event loop
// turning while they run. each host is a child process (bomb-host.ts), so a host that hangs fails these cases, not mocha
import { type ChildProcess, spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'
import { after, before, describe, it } from 'mocha'

const hostFile = fileURLToPath(new URL('./bomb-host.ts', import.meta.url))

// some of these V8 cannot contain within isolated-vm's limit (a Map or Set rehashing into a table the heap cannot hold,
// measured here): its out-of-memory handler then parks the thread running the isolate
const bombs: Record<string, string> = {
  'a Map bomb': 'const m = new Map()\nfor (let i = 0; ; i++) m.set(i, i + 0.5)',
  'a Set bomb': 'const s = new Set()\nfor (let i = 0; ; i++) s.add(i + 0.5)',
  'an array bomb': 'const a = []\nfor (let i = 0; ; i++) a.push(i + 0.5)',
  'a string bomb': 'let s = "ab"\nwhile (true) { s += s; s.charCodeAt(s.length >> 1) }',
}
const cases = Object.entries(bombs).flatMap(([title, code]) => [1, 100].map((calls) => ({ title, code, calls })))

interface Report {
  outcome: { ok: boolean; kind?: string; message?: string; result?: string }
  made: number
  turned: boolean
  beats: number
  next: { ok: boolean; result?: string }
}

// V8 prints this report to the process's stderr from native code before its out-of-memory handler runs; nothing else
// may reach the host's streams
const gcReport = /^(<--- (Last few GCs|JS stacktrace) --->|\[\d+:0x[0-9a-f]+\]\s+\d+ ms: .*|\s*)$/

const hangMs = 120000

describe('isolated-vm, in-process: memory bombs after tool calls, in a host process of their own', function () {
  this.timeout(cases.length * hangMs)
  let proc: ChildProcess
  let stdout = ''
  let stderr = ''
  let lines: Promise<string[]>
  let exited: Promise<{ code: number | null; signal: string | null }>

  before(() => {
    proc = spawn(process.execPath, ['--no-node-snapshot', '--import', 'tsx/esm', hostFile, JSON.stringify(cases.map(({ code, calls }) => [code, calls]))], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })))
    proc.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
    // a host that hangs reports nothing more: it is ended once it said nothing for a long while (no case takes that
    // long), so that every case fails at once instead of each at mocha's timeout
    let silent: NodeJS.Timeout | undefined
    const watch = () => {
      clearTimeout(silent)
      silent = setTimeout(() => proc.kill('SIGKILL'), hangMs)
    }
    watch()
    // every line up to the host's last (`end`), or what it wrote before it exited
    lines = new Promise((resolve) => {
      const done = () => {
        clearTimeout(silent)
        resolve(stdout.split('\n').filter(Boolean))
      }
      proc.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
        stdout += chunk
        watch()
        if (stdout.includes('"end":true')) done()
      })
      proc.on('exit', done)
    })
  })
  after(() => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL')
  })

  const report = async (index: number, title: string): Promise<Report> => {
    const got = await lines
    if (got.length <= index) expect.fail(`the host stopped answering before "${title}" ended: ${stderr.slice(-600)}`)
    return JSON.parse(got[index])
  }

  cases.forEach(({ title, calls }, index) => {
    it(`ends ${title} made after ${calls} tool call${calls > 1 ? 's' : ''} as memory, the host's event loop turning`, async () => {
      const { outcome, made, turned, next } = await report(index, `${title} after ${calls}`)
      if (outcome.ok) expect.fail(`the bomb ran to completion: ${outcome.result}`)
      expect(made).to.equal(calls)
      expect(outcome.kind, outcome.message).to.equal('memory')
      // the reply to the last call went out on the host's thread, and the host went on while the bomb ran
      expect(turned, 'the host turned its event loop after the last reply').to.equal(true)
      expect(next).to.deep.equal({ ok: true, result: '[{"n":1},2]' })
    })
  })

  it("writes nothing to the host's streams but V8's report of each out-of-memory it could not contain; a parked isolate keeps the host from exiting", async () => {
    const got = await lines
    const end = got.length > 0 ? JSON.parse(got[got.length - 1]) : {}
    expect(end, `the host did not finish: ${stderr.slice(-600)}`).to.have.property('end', true)
    expect(got).to.have.length(cases.length + 1)
    const foreign = stderr.split('\n').filter((line) => !gcReport.test(line))
    expect(foreign, 'the host wrote to stderr').to.deep.equal([])
    expect(stderr.split('<--- Last few GCs --->').length - 1).to.equal(end.parked)
    if (end.parked === 0) {
      expect(await exited).to.deep.equal({ code: 0, signal: null })
    } else {
      // isolated-vm 5.0.4 keeps a reference on the event loop for the parked thread, and at exit joins it (a pool
      // thread) for good: this host cannot exit by itself, nor by process.exit (see the README's tiers)
      proc.kill('SIGKILL')
      expect(await exited).to.deep.equal({ code: null, signal: 'SIGKILL' })
    }
  })
})
