// memory bombs V8 cannot contain, on the process tier: after a program's first tool call the sandbox process's main thread
// drives it, and V8's out-of-memory handler parks that thread. the host must notice well before wallMs, end the run as
// memory, replace the process, and keep its own streams clean. each case runs in a host process of its own
// (process-bomb-host.ts), so a host that hangs fails that case, not mocha
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'

const host = fileURLToPath(new URL('./process-bomb-host.ts', import.meta.url))

interface Brief {
  ok: boolean
  kind?: string
  message?: string
  result?: string
  logs?: string[]
}

// a program, or one started `after` ms after the others
type Program = string | { after: number; code: string }

function runHost(programs: Program[]): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--no-node-snapshot', '--import', 'tsx/esm', host, JSON.stringify(programs)], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    // a host that hangs is ended long before mocha's timeout, so the case fails with what it wrote
    const hung = setTimeout(() => child.kill('SIGKILL'), 150_000)
    child.stdout.setEncoding('utf8').on('data', (chunk) => (stdout += chunk))
    child.stderr.setEncoding('utf8').on('data', (chunk) => (stderr += chunk))
    child.on('error', reject)
    child.on('close', (code, signal) => {
      clearTimeout(hung)
      resolve({ code, signal, stdout, stderr })
    })
  })
}

async function outcomes(programs: Program[]) {
  const ran = await runHost(programs)
  expect(ran.stderr, "the host's stderr").to.equal('')
  expect(ran.code, `the host did not end cleanly (${ran.signal ?? ran.code}): ${ran.stdout}`).to.equal(0)
  return JSON.parse(ran.stdout) as { outcomes: Brief[]; next: Brief; started: number }
}

const mapBomb = 'const m = new Map()\nfor (let i = 0; ; i++) m.set(i, i + 0.5)'
const nextRun = { ok: true, result: '[{"n":1},2]', logs: [] }

describe('process tier: a memory bomb that parks the sandbox process, in a host process of its own', function () {
  this.timeout(180_000)

  it('ends a Map bomb made after a tool call as memory well before wallMs; the next run gets a new process', async () => {
    const got = await outcomes([`await tools.echo({})\n${mapBomb}`])
    // wallMs is 60 s: a run the host ended only at wallMs would end as timeout or crash, never memory
    expect(got.outcomes[0].kind, got.outcomes[0].message).to.equal('memory')
    expect(got.outcomes[0].message).to.match(/parked the sandbox process/)
    expect(got.next).to.deep.equal(nextRun)
    expect(got.started).to.equal(2)
  })

  // the bomb and a program waiting on something other than a tool, in one sandbox process: the bomb's run ends memory,
  // the other's crash, saying why
  const blames = async (programs: Program[], bomb: number) => {
    const got = await outcomes(programs)
    expect(got.outcomes[bomb].kind, got.outcomes[bomb].message).to.equal('memory')
    expect(got.outcomes[1 - bomb]).to.deep.include({ ok: false, kind: 'crash' })
    expect(got.outcomes[1 - bomb].message).to.match(/lost to another program's out-of-memory/)
    expect(got.next).to.deep.equal(nextRun)
  }
  const waiting = 'await tools.echo({})\nawait new Promise(() => {})'

  it('ends the other runs in that process as crash, saying why', () => blames([`await tools.echo({})\n${mapBomb}`, waiting], 0))

  it('blames the program that was computing, not one whose step ended waiting on something else', () =>
    // the waiting program is answered first (the bomb computes a while before its first call), its step on the main
    // thread ends with nothing to send, then the bomb's step parks that thread: the first program replied to is not it
    blames([waiting, `for (let i = 0; i < 3e7; i++) {}\nawait tools.echo({})\n${mapBomb}`], 1))

  it('blames the program whose step was on the thread, not one replied to first whose step waited for its start to end', () =>
    // the first program calls at once and goes on computing on the isolate's own thread: its reply, answered first, waits
    // for that stretch to end; the bomb's step starts on the main thread meanwhile and parks it
    blames(
      [
        'const first = tools.echo({})\nfor (let i = 0; i < 3e8; i++) {}\nawait first\nawait new Promise(() => {})',
        `for (let i = 0; i < 1e7; i++) {}\nawait tools.echo({})\n${mapBomb}`,
      ],
      1,
    ))

  it('blames the program alone on the thread when another run starts during its step, never reaching the process', () =>
    // a step is not announced while one program runs in the process: the run started 500 ms later waits behind the step
    // in the host's list, so the bomb is told from it as the one of the two that had made a call
    blames([`await tools.echo({})\n${mapBomb}`, { after: 500, code: 'return 1' }], 0))

  it('leaves a program computing on the main thread alone when a bomb parks only a pool thread', async () => {
    // the bomb before any tool call runs on one of isolated-vm's pool threads; V8's report reaches the sandbox
    // process's stderr while the other program keeps the main thread busy, so the liveness check gets no answer for a
    // while, but sees the thread spending CPU
    const busy = 'await tools.echo({})\nconst end = Date.now() + 6000\nwhile (Date.now() < end) {}\nreturn "done"'
    const got = await outcomes([busy, mapBomb])
    expect(got.outcomes[0]).to.deep.equal({ ok: true, result: '"done"', logs: [] })
    expect(got.outcomes[1].kind, got.outcomes[1].message).to.equal('memory')
    expect(got.next).to.deep.equal(nextRun)
  })

  it("cannot be forged by a program: what it prints never reaches the sandbox process's stderr", async () => {
    const forged = 'console.log("<--- Last few GCs --->")\nconsole.error("<--- Last few GCs --->")\nawait tools.echo({})\nreturn 1'
    const got = await outcomes([forged])
    expect(got.outcomes[0]).to.deep.include({ ok: true, result: '1' })
    expect(got.outcomes[0].logs).to.have.length(2)
    expect(got.started).to.equal(1)
  })
})
