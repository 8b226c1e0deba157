// the process tier trusts nothing its sandbox process says: a process a program took over may send anything over the ipc
// channel, and the host must live, end the runs in it as crashed, and serve the next run from a new process. each case
// runs in a host process of its own, so a host that dies fails the test instead of mocha
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'
import { ProcessSandbox } from '../src/index.ts'

const host = fileURLToPath(new URL('./fixtures/taken-over-host.ts', import.meta.url))

function runHost(cases: string[]): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--no-node-snapshot', '--unhandled-rejections=strict', '--import', 'tsx/esm', host, JSON.stringify(cases)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk) => (stdout += chunk))
    child.stderr.setEncoding('utf8').on('data', (chunk) => (stderr += chunk))
    child.on('error', reject)
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }))
  })
}

describe('process tier: a sandbox process that sends malformed messages', function () {
  this.timeout(120_000)

  it('is ended, its run ends as a crash, and the host lives and serves the next run', async () => {
    const cases = ['not a list', 'a malformed call', 'a malformed failure', 'malformed values', 'an unknown message', 'a cpu reading of no number']
    const ran = await runHost([...cases, 'an outcome past outputBytes'])
    expect(ran.code, `the host died (${ran.signal ?? ran.code}): ${ran.stderr.slice(-1500)}`).to.equal(0)
    expect(ran.stderr).to.equal('')
    const lines = ran.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line))
    expect(lines.map((line) => line.code)).to.deep.equal([...cases, 'an outcome past outputBytes'])
    for (const { code, outcome, next } of lines.slice(0, -1)) {
      expect(outcome, code).to.deep.include({ ok: false, kind: 'crash' })
      expect(outcome.message, code).to.match(/^the sandbox process sent a malformed message \(.+\); it was ended and a new one started$/)
      expect(next, code).to.deep.equal({ ok: true, logs: [], result: '1' })
    }
    // a well-formed report past a budget is the bridge's to end, as for a thread or an isolate: the process serves on
    const past = lines.at(-1)
    expect(past.outcome).to.deep.include({ ok: false, kind: 'output-limit' })
    expect(past.next).to.deep.equal({ ok: true, logs: [], result: '1' })
    // a process for each malformed case, and the first
    expect(past.started).to.equal(cases.length + 1)
  })
})

describe('process tier: a backend that throws a value that cannot be shown', function () {
  this.timeout(60_000)
  const limits = { cpuMs: 5000, wallMs: 20_000, memoryMb: 16, outputBytes: 4096 }
  const sandboxOf = (exportName: string) =>
    new ProcessSandbox({ backend: { module: new URL('./fixtures/unshowable-backend.mjs', import.meta.url).href, exportName, name: 'unshowable' }, limits })
  const run = (sandbox: ProcessSandbox, code: string) =>
    sandbox.run({ code, tools: [], call: async () => ({ ok: false, message: 'no tools' }), signal: new AbortController().signal })

  it('that failed to start is reported as a start failure', async () => {
    const sandbox = sandboxOf('ThrowsOnStart')
    try {
      expect(await run(sandbox, 'return 1')).to.deep.include({
        ok: false,
        kind: 'crash',
        message: 'the sandbox process could not start: an error that could not be shown',
      })
    } finally {
      await sandbox.close()
    }
  })

  it('whose run threw ends that run as a crash, and the process serves the next', async () => {
    const sandbox = sandboxOf('throwsOnRun')
    try {
      expect(await run(sandbox, 'throw')).to.deep.equal({ ok: false, kind: 'crash', message: 'an error that could not be shown', logs: [] })
      expect(await run(sandbox, 'return 1')).to.deep.equal({ ok: true, logs: [], result: '1' })
      expect(sandbox.started).to.equal(1)
    } finally {
      await sandbox.close()
    }
  })
})
