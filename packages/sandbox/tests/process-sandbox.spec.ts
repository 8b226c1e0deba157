// the process tier trusts nothing its sandbox process says: a process a program took over may send anything over the ipc
// channel, and the host must live, end the runs in it as crashed, and serve the next run from a new process. each case
// runs in a host process of its own, so a host that dies fails the test instead of mocha
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'

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
    const cases = ['not an object', 'a malformed call', 'a malformed outcome', 'an outcome past outputBytes', 'an unknown message']
    const ran = await runHost(cases)
    expect(ran.code, `the host died (${ran.signal ?? ran.code}): ${ran.stderr.slice(-1500)}`).to.equal(0)
    expect(ran.stderr).to.equal('')
    const lines = ran.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line))
    expect(lines.map((line) => line.code)).to.deep.equal(cases)
    for (const { code, outcome, next } of lines) {
      expect(outcome, code).to.deep.include({ ok: false, kind: 'crash' })
      expect(outcome.message, code).to.match(/^the sandbox process sent a malformed message \(.+\); it was ended and a new one started$/)
      expect(next, code).to.deep.equal({ ok: true, logs: [], result: '1' })
    }
  })
})
