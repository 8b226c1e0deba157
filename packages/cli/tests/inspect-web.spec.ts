import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { expect } from 'chai'
import { BIN, faber, serving } from './helpers.ts'

const DEPLOYMENT = `mode: code
plugins:
  '@faber/plugin-tools-fs': { root: '\${dir}/ws' }
  '@faber/plugin-approval': { require: [write] }
  '@faber/plugin-approval#WebAnswerer': {}
agents:
  - name: main
`

describe('faber inspect --web', function () {
  this.timeout(60_000)
  let dir: string
  let child: ChildProcessWithoutNullStreams
  let url: string

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-inspect-web-'))
    await mkdir(join(dir, 'ws'))
    await writeFile(join(dir, 'deploy.yml'), DEPLOYMENT)
    const served = serving(['inspect', join(dir, 'deploy.yml'), '--web', '127.0.0.1:0'], /is at (http:\/\/\S+)/)
    child = served.child
    url = await served.url
  })

  after(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it('serves the page and the report of the running deployment', async () => {
    expect(url).to.match(/^http:\/\/127\.0\.0\.1:\d+\/$/)
    const page = await fetch(url)
    expect(page.status).to.equal(200)
    expect(await page.text()).to.contain('<title>Faber inspector</title>')
    const view = (await (await fetch(new URL('api/report', url))).json()) as { report: { agents: { name: string }[] }; answerer: { enabled: boolean } }
    expect(view.report.agents.map((a) => a.name)).to.deep.equal(['main'])
    expect(view.answerer.enabled).to.equal(true)
  })

  it('keeps running until Ctrl-C, then stops cleanly', async () => {
    const exited = new Promise((resolve) => child.on('close', resolve))
    child.kill('SIGINT')
    expect(await exited).to.equal(0)
  })

  it('rejects a bad --web, --token without --web and --json with --web', async () => {
    const file = join(dir, 'deploy.yml')
    const [bad, token, json] = await Promise.all([
      faber(['inspect', file, '--web', 'nonsense']),
      faber(['inspect', file, '--token', 'x'.repeat(20)]),
      faber(['inspect', file, '--web', '0', '--json']),
    ])
    expect(bad.code).to.equal(2)
    expect(bad.stderr).to.include('faber inspect: --web: the web view listens on [HOST:]PORT')
    expect(token.code).to.equal(2)
    expect(token.stderr).to.include('--token only applies with --web')
    expect(json.code).to.equal(2)
    expect(json.stderr).to.include('pick one')
  })
})

describe('faber demo --web', function () {
  this.timeout(120_000)

  it('serves the demo deployment live, and keeps it after the session until Ctrl-C', async () => {
    const child = spawn(process.execPath, [BIN, 'demo', '--web', '127.0.0.1:0'], { stdio: ['pipe', 'pipe', 'pipe'] })
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
    const exited = new Promise((resolve) => child.on('close', resolve))
    const url = await new Promise<string>((resolve, reject) => {
      let address = ''
      createInterface({ input: child.stdout }).on('line', (line) => {
        address ||= /the live web view is at (http:\/\/\S+)/.exec(line)?.[1] ?? ''
        if (address && line.includes('stay until Ctrl-C')) resolve(address)
      })
      child.on('close', (code) => reject(new Error(`faber demo --web exited with ${code}: ${stderr}`)))
    })
    // the stream opens with a snapshot of what the demo did
    const res = await fetch(new URL('api/events', url))
    const reader = res.body!.getReader()
    let text = ''
    while (!text.includes('\n\n')) text += new TextDecoder().decode((await reader.read()).value)
    await reader.cancel()
    const snapshot = JSON.parse(/^event: snapshot\ndata: (.*)$/m.exec(text)![1]) as {
      calls: { name: string; nested: boolean; outcome: string }[]
      programs: { code: string }[]
    }
    expect(snapshot.calls.some((call) => call.name === 'run_code' && !call.nested)).to.equal(true)
    expect(snapshot.calls.filter((call) => call.nested).length).to.be.greaterThan(2)
    expect(snapshot.calls.some((call) => call.nested && call.outcome === 'error')).to.equal(true)
    expect(snapshot.programs.length).to.be.greaterThan(0)
    child.kill('SIGINT')
    expect(await exited).to.equal(0)
  })
})
