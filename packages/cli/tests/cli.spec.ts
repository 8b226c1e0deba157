import { spawn } from 'node:child_process'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { expect } from 'chai'
import { colorEnabled, createStyle } from '../src/index.ts'
import { BIN, faber, faberReaderGone, jsonLines } from './helpers.ts'

const SCRIPTED = `mode: code
plugins:
  '@faber/sandbox': {}
  '@faber/plugin-tools-fs': { root: '\${dir}/ws' }
  '@faber/plugin-tool-cordis': {}
agents:
  - name: main
model:
  provider: scripted
  script:
    - toolCalls: [{ name: read, arguments: { path: notes.txt } }]
    - toolCalls:
        - name: run_code
          arguments: { code: "const r = await tools.read({ path: 'notes.txt' }); return r.text", description: read the notes }
    - text: the notes say hello
    - text: second turn answered
session:
  log: ./session.jsonl
`

describe('faber (the command)', function () {
  this.timeout(60_000)
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-cli-'))
    await mkdir(join(dir, 'ws'))
    await writeFile(join(dir, 'ws', 'notes.txt'), 'hello\n')
    await writeFile(join(dir, 'deploy.yml'), SCRIPTED)
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  it('has --help on every command', async () => {
    for (const command of ['demo', 'run', 'chat', 'inspect', 'mcp']) {
      const ran = await faber([command, '--help'])
      expect(ran.code, command).to.equal(0)
      expect(ran.stdout, command).to.include(`faber ${command}`).and.include('Usage:')
    }
    const top = await faber(['--help'])
    expect(top.code).to.equal(0)
    expect(top.stdout).to.include('Commands:')
  })

  it('exits 2 with a message on a usage error', async () => {
    const unknown = await faber(['inspect', join(dir, 'deploy.yml'), '--bogus'])
    expect(unknown.code).to.equal(2)
    expect(unknown.stderr).to.equal('faber inspect: unknown option --bogus\nRun faber inspect --help for its options.\n')
    const two = await faber(['run', 'a.yml', 'b.yml'])
    expect(two.code).to.equal(2)
    expect(two.stderr).to.include('expected one deployment file, got 2')
    const command = await faber(['frobnicate'])
    expect(command.code).to.equal(2)
    expect(command.stderr).to.include('unknown command "frobnicate"')
  })

  it('a reader that stops reading early (faber demo | head -1) ends nothing badly: no EPIPE trace, the exit code the command gives', async () => {
    for (const args of [['demo'], ['inspect', join(dir, 'deploy.yml')], ['--help']]) {
      const ran = await faberReaderGone(args)
      expect(ran.stderr, args[0]).to.not.contain('EPIPE')
      expect(ran.code, args[0]).to.equal(0)
    }
  })

  it('runs a deployment: one turn per input line, logged, and continued on the next run', async () => {
    const first = await faber(['run', join(dir, 'deploy.yml'), '--json'], { input: 'what do the notes say?\n' })
    expect(first.code, first.stderr).to.equal(0)
    const events = jsonLines(first.stdout)
    const ends = events.filter((e) => e.type === 'call-end')
    expect(ends[0].result.code).to.equal('UNKNOWN_TOOL')
    expect(ends[1].result.content).to.include('hello')
    expect(events.find((e) => e.type === 'turn-end')?.outcome).to.include({ reason: 'done', text: 'the notes say hello' })
    const log = jsonLines(await readFile(join(dir, 'session.jsonl'), 'utf8'))
    expect(log.filter((r) => r.type === 'nested-call').map((r) => r.name)).to.deep.equal(['read'])

    // the scripted model starts its script again, so the second run plays the first turn's lines; the log decides the turn number
    const second = await faber(['run', join(dir, 'deploy.yml')], { input: 'and now?\n' })
    expect(second.code, second.stderr).to.equal(0)
    expect(second.stdout).to.include('continuing the session').and.include('turn 2 done')
  })

  it('prints the transcript plain when piped, and reports a model error with exit code 1', async () => {
    const ran = await faber(['run', join(dir, 'deploy.yml')], { input: 'one\ntwo\nthree\n' })
    expect(ran.stdout).not.to.include('\x1b[')
    expect(ran.stdout).to.include('you › one').and.include('second turn answered')
    // the failure is one message on stderr, and nothing of it on stdout
    expect(ran.stderr).to.equal(`faber run: turn 3 failed: the scripted model has no turn 5: its script holds 4 turn(s)\n`)
    expect(ran.stdout).not.to.include('no turn 5')
    expect(ran.code).to.equal(1)
  })

  it('inspects a deployment as text or JSON', async () => {
    const text = await faber(['inspect', join(dir, 'deploy.yml')])
    expect(text.code, text.stderr).to.equal(0)
    expect(text.stdout).to.include('agent main: mode code').and.include('shown to the model (1): run_code')
    const json = await faber(['inspect', join(dir, 'deploy.yml'), '--json'])
    const report = JSON.parse(json.stdout)
    expect(report.agents.map((a: { name: string }) => a.name)).to.deep.equal(['main'])
  })

  it('reports a bad deployment with exit code 2', async () => {
    await writeFile(join(dir, 'bad.yml'), "plugins:\n  '@faber/plugin-tools-fs':\n    root: 42\n")
    const ran = await faber(['inspect', join(dir, 'bad.yml')])
    expect(ran.code).to.equal(2)
    expect(ran.stderr.trim()).to.match(/bad\.yml:3: plugins\["@faber\/plugin-tools-fs"\]\.root: expected string but got 42/)
  })

  it('inspects a deployment whose plugin did not start: shown as not in force, exit code 2', async () => {
    const broken = `plugins:\n  '@faber/plugin-guards':\n    deny: [{ tools: ['*'], argument: '$.path', pattern: '([', reason: no }]\n`
    await writeFile(join(dir, 'broken.yml'), broken)
    const ran = await faber(['inspect', join(dir, 'broken.yml')])
    expect(ran.code, ran.stderr).to.equal(2)
    expect(ran.stdout).to.include('DEPLOYMENT NOT IN FORCE: no tool runs')
    expect(ran.stdout).to.match(/NOT IN FORCE: guards \(failed\): it failed to start \(.*Invalid regular expression/)
    const json = JSON.parse((await faber(['inspect', join(dir, 'broken.yml'), '--json'])).stdout)
    expect(json.deployment.inForce).to.equal(false)
    expect(json.deployment.faults[0]).to.deep.include({ plugin: 'guards', state: 'failed', essential: true })
  })

  it('serves the agent over MCP on stdio', async () => {
    const child = spawn(process.execPath, [BIN, 'mcp', join(dir, 'deploy.yml')], { stdio: ['pipe', 'pipe', 'pipe'] })
    const lines = createInterface({ input: child.stdout })
    const replies = new Map<number, (value: any) => void>()
    lines.on('line', (line) => {
      const message = JSON.parse(line)
      replies.get(message.id)?.(message)
    })
    const request = (id: number, method: string, params: unknown) => {
      const reply = new Promise<any>((resolve) => replies.set(id, resolve))
      child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id, method, params })}\n`)
      return reply
    }
    try {
      const init = await request(1, 'initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } })
      expect(init.result.serverInfo.name).to.equal('faber')
      child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' })}\n`)
      const list = await request(2, 'tools/list', {})
      expect(list.result.tools.map((t: { name: string }) => t.name)).to.deep.equal(['run_code'])
      const direct = await request(3, 'tools/call', { name: 'read', arguments: { path: 'notes.txt' } })
      expect(direct.result.isError).to.equal(true)
      expect(direct.result.content[0].text).to.include('tools.read(')
    } finally {
      child.stdin.end()
      await new Promise((resolve) => child.on('close', resolve))
    }
  })
})

describe('terminal style', () => {
  it('colors a TTY, never a pipe or NO_COLOR, and FORCE_COLOR wins over a pipe', () => {
    const tty = { isTTY: true } as NodeJS.WriteStream
    const pipe = { isTTY: false } as NodeJS.WriteStream
    expect(colorEnabled(tty, {})).to.equal(true)
    expect(colorEnabled(pipe, {})).to.equal(false)
    expect(colorEnabled(tty, { NO_COLOR: '1' })).to.equal(false)
    expect(colorEnabled(tty, { TERM: 'dumb' })).to.equal(false)
    expect(colorEnabled(pipe, { FORCE_COLOR: '1' })).to.equal(true)
    expect(createStyle(true).paint('x', 'red')).to.equal('\x1b[31mx\x1b[39m')
    expect(createStyle(false).paint('x', 'red')).to.equal('x')
  })
})

describe('faber chat', function () {
  this.timeout(60_000)

  it('talks to an OpenAI-compatible server on the standard deployment', async () => {
    const { createServer } = await import('node:http')
    const bodies: any[] = []
    const server = createServer(async (req, res) => {
      let text = ''
      for await (const chunk of req) text += chunk
      bodies.push({ auth: req.headers.authorization, body: JSON.parse(text) })
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'hello from the server' }, finish_reason: 'stop' }] })}\n\n`)
      res.end('data: [DONE]\n\n')
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const { port } = server.address() as import('node:net').AddressInfo
    const root = await mkdtemp(join(tmpdir(), 'faber-chat-'))
    try {
      const ran = await faber(['chat', '--base-url', `http://127.0.0.1:${port}/v1`, '--model', 'm1', '--root', root], {
        input: 'hi\n',
        env: { FABER_API_KEY: 'sk-chat' },
      })
      expect(ran.code, ran.stderr).to.equal(0)
      expect(ran.stdout).to.include('hello from the server')
      expect(bodies[0].auth).to.equal('Bearer sk-chat')
      expect(bodies[0].body.model).to.equal('m1')
      expect(bodies[0].body.tools.map((t: { function: { name: string } }) => t.function.name)).to.deep.equal(['run_code'])
      expect(bodies[0].body.messages[0].content).to.include(root)
    } finally {
      server.close()
      await rm(root, { recursive: true, force: true })
    }
  })

  it('says what is missing without a model', async () => {
    const ran = await faber(['chat'], { env: { FABER_MODEL: undefined } })
    expect(ran.code).to.equal(2)
    expect(ran.stderr).to.include('no model given')
  })
})
