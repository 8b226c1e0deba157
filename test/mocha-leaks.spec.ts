import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { expect } from 'chai'

/** whether `pid` is gone (or a zombie waiting for init to reap it) within 10 s */
async function gone(pid: number) {
  for (let i = 0; i < 200; i++) {
    let state: string
    try {
      state = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0]
    } catch {
      return true
    }
    if (state === 'Z') return true
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return false
}

// the test command ends by itself even when a test leaks a handle, and says what leaked (scripts/mocha-leaks.cjs)
describe('the test command, when a test leaks a child process', () => {
  it('names the leaked process, kills it, and still ends with the summary line and mocha exit code', async function () {
    this.timeout(120_000)
    const child = spawn('pnpm', ['exec', 'mocha', 'test/fixtures/leaks-a-child.fixture.ts'], {
      env: { ...process.env, FABER_LEAK_GRACE_MS: '300', FORCE_COLOR: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    const [code] = await once(child, 'close')
    expect(stderr).to.match(/LEAK: the tests ended, but 0\.3 s later node is still kept alive/)
    const pid = Number(/child process (\d+): \S*node -e setInterval/.exec(stderr)?.[1])
    expect(pid, stderr).to.be.greaterThan(0)
    expect(await gone(pid), 'the leaked process was killed').to.equal(true)
    expect(stdout.trimEnd().split('\n').at(-1)).to.equal('1 passed, 0 failed')
    expect(code).to.equal(0)
  })
})
