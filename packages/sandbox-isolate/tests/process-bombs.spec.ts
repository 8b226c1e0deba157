// memory bombs V8 cannot contain, on the process tier: a program runs on its isolate's thread (one of isolated-vm's pool
// threads in the sandbox process), which V8's out-of-memory handler parks. the run must end memory well before wallMs,
// other programs in that process go on, the process is replaced once they ended, and the host's streams stay clean. each
// case runs in a host process of its own (process-bomb-host.ts), so a host that hangs fails that case, not mocha
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

type Program = string

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

describe('process tier: a memory bomb that parks a thread of the sandbox process, in a host process of its own', function () {
  this.timeout(180_000)

  for (const [when, bomb] of [
    ['before any tool call', mapBomb],
    ['after a tool call', `await tools.echo({})\n${mapBomb}`],
  ])
    it(`ends a Map bomb made ${when} as memory well before wallMs; the next run gets a new process`, async () => {
      const got = await outcomes([bomb])
      // wallMs is 60 s: a run the host ended only at wallMs would end as timeout or crash, never memory
      expect(got.outcomes[0].kind, got.outcomes[0].message).to.equal('memory')
      expect(got.outcomes[0].message).to.match(/V8 ran out of memory outside the isolate's limit/)
      expect(got.next).to.deep.equal(nextRun)
      expect(got.started).to.equal(2)
    })

  it('leaves a program sharing the process alone: it runs to its end, and the process is replaced after it', async () => {
    // the other program makes calls before and after the bomb parks its thread, and computes meanwhile
    const busy = 'await tools.echo({})\nconst end = Date.now() + 3000\nwhile (Date.now() < end) {}\nreturn (await tools.echo({ n: 2 })).n'
    const got = await outcomes([busy, `await tools.echo({})\n${mapBomb}`])
    expect(got.outcomes[0]).to.deep.equal({ ok: true, result: '2', logs: [] })
    expect(got.outcomes[1].kind, got.outcomes[1].message).to.equal('memory')
    expect(got.next).to.deep.equal(nextRun)
    expect(got.started).to.equal(2)
  })

  it("prints nothing to the sandbox process's stderr from a program, and ends nothing by printing V8's report", async () => {
    const forged = 'console.log("<--- Last few GCs --->")\nconsole.error("<--- Last few GCs --->")\nawait tools.echo({})\nreturn 1'
    const got = await outcomes([forged])
    expect(got.outcomes[0]).to.deep.include({ ok: true, result: '1' })
    expect(got.outcomes[0].logs).to.have.length(2)
    expect(got.started).to.equal(1)
  })
})
