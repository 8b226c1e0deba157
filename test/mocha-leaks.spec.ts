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

/** `pnpm test <fixture>` as CI runs the test command, with a short grace: what it printed and its exit code */
async function runTests(fixture: string) {
  const child = spawn('pnpm', ['test', fixture], {
    env: { ...process.env, FABER_LEAK_GRACE_MS: '300', FORCE_COLOR: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk) => (stdout += chunk))
  child.stderr.on('data', (chunk) => (stderr += chunk))
  const [code] = await once(child, 'close')
  return { stdout, stderr, code, last: stdout.trimEnd().split('\n').at(-1) }
}

// the test command ends even when a test leaves something behind, says what, and keeps mocha's verdict
// (scripts/mocha-leaks.cjs and scripts/test.mjs)
describe('the test command, when a test leaves the process unable to end', function () {
  this.timeout(120_000)

  it('names a leaked child process and timer, kills the process, and ends with the summary line and exit code 0', async () => {
    const { stderr, code, last } = await runTests('test/fixtures/leaks-a-child.fixture.ts')
    expect(stderr).to.match(/LEAK: the tests ended, but 0\.3 s later node is still kept alive/)
    const pid = Number(/child process (\d+): \S*node -e setInterval/.exec(stderr)?.[1])
    expect(pid, stderr).to.be.greaterThan(0)
    expect(await gone(pid), 'the leaked process was killed').to.equal(true)
    expect(stderr).to.match(/timer setInterval\(60000 ms\) at .*leaks-a-child\.fixture\.ts:\d+/)
    expect(last).to.equal('2 passed, 0 failed')
    expect(code).to.equal(0)
  })

  it('ends a process that an isolate parked by V8 out of memory keeps from exiting, with exit code 0', async () => {
    const { stderr, code, last } = await runTests('test/fixtures/parks-an-isolate.fixture.ts')
    expect(stderr).to.match(/LEAK: .*\n {2}- nothing JavaScript can name: an isolated-vm isolate parked/)
    expect(last).to.equal('1 passed, 0 failed')
    expect(code).to.equal(0)
  })

  it('keeps the verdict of a process that dies after it (an abort at teardown), and says so on stderr', async () => {
    const { stderr, code, last } = await runTests('test/fixtures/aborts-at-exit.fixture.ts')
    expect(stderr).to.contain('pnpm test: the test process died of SIGABRT after mocha gave its verdict (above); the verdict stands')
    expect(last).to.equal('1 passed, 0 failed')
    expect(code).to.equal(0)
  })

  it('fails a run whose process dies before mocha gives its verdict', async () => {
    const { code, stdout } = await runTests('test/fixtures/aborts-in-a-test.fixture.ts')
    expect(stdout).not.to.match(/passed, \d+ failed/)
    expect(code).to.equal(134)
  })
})
