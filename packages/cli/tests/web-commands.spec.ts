// --web on the commands that do the work, as child processes the way the tool-cordis README writes them: `faber run
// deploy.yml --web PORT` against a local model server shows the model's run_code call with its nested calls while it
// runs; `faber inspect --web` with a port in use is one line and exit code 2, and stops on Ctrl-C with a page still
// following its stream.

import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { mkdir, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { expect } from 'chai'
import { type ModelServer, modelServer } from '../../agent/tests/model-servers.ts'
import { BIN, exampleCopy, faber, summaryProgram } from './helpers.ts'

const PROGRAM = summaryProgram('a summary\n')

function start(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: options.cwd,
    env: { ...process.env, NO_COLOR: '1', ...options.env },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve))
  /** the view's address, from the line the command prints */
  let mcpFound!: (url: string) => void
  const mcp = new Promise<string>((resolve) => (mcpFound = resolve))
  const url = new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      const found = /the live web view is at (http:\/\/\S+)/.exec(line)
      if (found) resolve(found[1])
      const served = /at (http:\/\/\S+\/mcp)/.exec(line)
      if (served) mcpFound(served[1])
    })
    exited.then((code) => reject(new Error(`faber ${args[0]} exited with ${code} before serving the view: ${stderr}`)))
  })
  return { child, url, mcp, exited, stderr: () => stderr }
}

/** the stream's first event, the snapshot; the stream is left open */
async function snapshotOf(url: string) {
  const res = await fetch(new URL('api/events', url))
  const reader = res.body!.getReader()
  let text = ''
  while (!text.includes('\n\n')) text += new TextDecoder().decode((await reader.read()).value)
  const snapshot = JSON.parse(/^event: snapshot\ndata: (.*)$/m.exec(text)![1]) as {
    calls: { name: string; callId: string; nested: boolean; outerCallId?: string; outcome: string; agent: string | null }[]
    programs: { callId: string; code: string }[]
  }
  const closed = (async () => {
    while (!(await reader.read()).done);
  })().catch(() => undefined)
  return { snapshot, closed, cancel: () => reader.cancel() }
}

describe('--web on the commands that work', function () {
  this.timeout(120_000)
  let dir: string
  let server: ModelServer | undefined
  let child: ChildProcessWithoutNullStreams | undefined

  beforeEach(async () => {
    dir = await exampleCopy('faber-web-')
  })
  afterEach(async () => {
    child?.kill('SIGKILL')
    child = undefined
    await server?.close()
    server = undefined
    await rm(dir, { recursive: true, force: true })
  })

  it("faber run deploy.yml --web PORT: the model's program and its nested calls show while it runs; it exits 0 when done", async () => {
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    let asked!: () => void
    const secondRequest = new Promise<void>((resolve) => (asked = resolve))
    server = await modelServer('openai', [
      { toolCalls: [{ name: 'run_code', arguments: { code: PROGRAM, description: 'read the notes, try to write' } }] },
      {
        // the second request waits until the test has looked at the view
        raw: async (res) => {
          asked()
          await gate
          const chunk = (delta: unknown, finish: string | null) =>
            `data: ${JSON.stringify({ id: 'c2', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
          res.writeHead(200, { 'content-type': 'text/event-stream' })
          res.write(chunk({ content: 'Done.' }, null))
          res.write(chunk({}, 'stop'))
          res.end('data: [DONE]\n\n')
        },
      },
    ])
    const run = start(['run', 'faber.yml', '--web', '0', '--base-url', server.url], { cwd: dir, env: { FABER_API_KEY: 'sk-local' } })
    child = run.child
    run.child.stdin.end('summarise the notes\n')
    const url = await run.url
    expect(url).to.match(/^http:\/\/127\.0\.0\.1:\d+\/$/)
    await secondRequest
    const { snapshot, closed } = await snapshotOf(url)
    const program = snapshot.calls.find((call) => call.name === 'run_code' && !call.nested)
    expect(program?.outcome).to.equal('ok')
    const nested = snapshot.calls.filter((call) => call.nested && call.outerCallId === program!.callId).map((call) => [call.name, call.outcome])
    expect(nested).to.deep.equal([
      ['read', 'ok'],
      ['write', 'error'],
    ])
    expect(snapshot.programs.map((p) => p.code)).to.deep.equal([PROGRAM])
    const page = await fetch(url)
    expect(page.headers.get('content-security-policy')).to.contain("script-src 'self'")
    release()
    expect(await run.exited, run.stderr()).to.equal(0)
    // the view went with the command
    await closed
    const after = await fetch(url).then(
      () => 'answered',
      () => 'refused',
    )
    expect(after).to.equal('refused')
  })

  it("faber chat --web PORT (piped): the model's program shows while it runs; it exits 0 at the end of the input", async () => {
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    let asked!: () => void
    const secondRequest = new Promise<void>((resolve) => (asked = resolve))
    server = await modelServer('openai', [
      { toolCalls: [{ name: 'run_code', arguments: { code: "return (await tools.read({ path: 'NOTES.md' })).totalLines", description: 'count' } }] },
      {
        raw: async (res) => {
          asked()
          await gate
          res.writeHead(200, { 'content-type': 'text/event-stream' })
          res.write(
            `data: ${JSON.stringify({ id: 'c2', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'Done.' }, finish_reason: 'stop' }] })}\n\n`,
          )
          res.end('data: [DONE]\n\n')
        },
      },
    ])
    const chat = start(['chat', '--web', '0', '--base-url', server.url, '--model', 'local-model', '--root', join(dir, 'workspace')], {
      cwd: dir,
      env: { FABER_API_KEY: 'sk-local' },
    })
    child = chat.child
    chat.child.stdin.end('count the lines of the notes\n')
    const url = await chat.url
    await secondRequest
    const { snapshot, closed } = await snapshotOf(url)
    const program = snapshot.calls.find((call) => call.name === 'run_code' && !call.nested)
    expect(program?.outcome).to.equal('ok')
    expect(snapshot.calls.filter((call) => call.outerCallId === program!.callId).map((call) => [call.name, call.outcome])).to.deep.equal([['read', 'ok']])
    release()
    expect(await chat.exited, chat.stderr()).to.equal(0)
    await closed
  })

  it("faber mcp deploy.yml --http PORT --web PORT: an MCP client's calls show in the view", async () => {
    await mkdir(join(dir, 'ws'))
    await writeFile(join(dir, 'ws', 'notes.txt'), 'hello\n')
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the deployment file's own ${dir} substitution
    await writeFile(join(dir, 'deploy.yml'), "mode: native\nplugins:\n  '@faber/plugin-tools-fs': { root: '${dir}/ws' }\n")
    const served = start(['mcp', 'deploy.yml', '--http', '0', '--web', '0'], { cwd: dir })
    child = served.child
    const [url, endpoint] = await Promise.all([served.url, served.mcp])
    const client = new Client({ name: 'test', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(endpoint)))
    try {
      const result = await client.callTool({ name: 'read', arguments: { path: 'notes.txt' } })
      expect(result.isError ?? false).to.equal(false)
    } finally {
      await client.close()
    }
    const { snapshot, cancel } = await snapshotOf(url)
    expect(snapshot.calls.map((call) => [call.name, call.outcome])).to.deep.include(['read', 'ok'])
    await cancel()
    served.child.kill('SIGINT')
    expect(await served.exited, served.stderr()).to.equal(0)
  })

  it('faber inspect --web with a port in use: one line, exit code 2, no stack', async () => {
    const taken = createServer()
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve))
    const { port } = taken.address() as { port: number }
    try {
      const ran = await faber(['inspect', 'faber.yml', '--web', String(port)], { cwd: dir })
      expect(ran.code).to.equal(2)
      expect(ran.stderr.trim()).to.equal(
        `faber inspect: --web: the web view cannot listen: 127.0.0.1:${port} is already in use: pick another port, or 0 for a free one`,
      )
    } finally {
      taken.close()
    }
  })

  it('faber inspect --web stops on Ctrl-C with exit code 0 while a page follows its stream', async () => {
    const inspect = start(['inspect', 'faber.yml', '--web', '0'], { cwd: dir })
    child = inspect.child
    const url = await inspect.url
    const { closed } = await snapshotOf(url)
    inspect.child.kill('SIGINT')
    expect(await inspect.exited, inspect.stderr()).to.equal(0)
    await closed
    // the token-less loopback view logs no token, and nothing went to stderr
    expect(inspect.stderr()).to.equal('')
  })
})
