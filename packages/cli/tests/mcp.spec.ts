// `faber mcp` as a child process: JSON-RPC under abuse on stdio (raw writes and the official SDK client, several
// sessions at once), and `--http`: concurrent streamable HTTP sessions with their own approvals, DNS rebinding
// protection, and the MCP inspector's CLI

import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { createInterface } from 'node:readline'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { type CallToolResult, type ElicitResult, McpError } from '@modelcontextprotocol/sdk/types.js'
import { expect } from 'chai'
import { BIN, faber, mcpOverHttp } from './helpers.ts'

const DEPLOYMENT = `mode: native
plugins:
  '@faber/plugin-tools-fs': { root: '\${dir}/ws' }
  '@faber/plugin-approval': { require: [write], except: [] }
`

const MB16 = 16 * 1024 * 1024

function text(result: unknown) {
  return (result as CallToolResult).content.map((part) => (part.type === 'text' ? part.text : '')).join('\n')
}

/** arguments nested `depth` levels deep, as JSON text (no JS value that deep is ever built here) */
function nested(depth: number) {
  return `${'['.repeat(depth)}1${']'.repeat(depth)}`
}

/** a `faber mcp` child spoken to with raw lines; replies are collected by id (and in order for id null) */
class RawSession {
  child: ChildProcessWithoutNullStreams
  stderr = ''
  replies: Record<string, any>[] = []
  private waiting: (() => void)[] = []
  exited: Promise<number | null>

  constructor(deployment: string, args: string[] = []) {
    this.child = spawn(process.execPath, [BIN, 'mcp', deployment, ...args], { stdio: ['pipe', 'pipe', 'pipe'] })
    this.child.stderr.on('data', (chunk: Buffer) => {
      this.stderr += chunk.toString()
      this.wake()
    })
    createInterface({ input: this.child.stdout }).on('line', (line) => {
      this.replies.push(JSON.parse(line))
      this.wake()
    })
    this.exited = new Promise((resolve) => this.child.on('close', resolve))
  }

  private wake() {
    for (const wake of this.waiting.splice(0)) wake()
  }

  /** resolves once `test` holds, re-checked on each reply or stderr chunk (mocha's timeout bounds it) */
  async until<T>(test: () => T | undefined): Promise<T> {
    for (;;) {
      const found = test()
      if (found !== undefined) return found
      await new Promise<void>((resolve) => this.waiting.push(resolve))
    }
  }

  write(line: string) {
    this.child.stdin.write(`${line}\n`)
  }

  request(id: number, method: string, params: unknown = {}) {
    this.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }))
    return this.reply(id)
  }

  reply(id: number | null, nth = 0) {
    return this.until(() => this.replies.filter((reply) => reply.id === id)[nth])
  }

  async end() {
    this.child.stdin.end()
    return this.exited
  }
}

describe('faber mcp: JSON-RPC under abuse', function () {
  this.timeout(60_000)
  let dir: string
  let deployment: string
  const clients: Client[] = []
  const raw: RawSession[] = []

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-mcp-'))
    await mkdir(join(dir, 'ws'))
    await writeFile(join(dir, 'ws', 'notes.txt'), 'hello\n')
    deployment = join(dir, 'deploy.yml')
    await writeFile(deployment, DEPLOYMENT)
  })
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((client) => client.close()))
    for (const session of raw.splice(0)) if (session.child.exitCode === null) session.child.kill()
  })
  after(() => rm(dir, { recursive: true, force: true }))

  function rawSession(args: string[] = []) {
    const session = new RawSession(deployment, args)
    raw.push(session)
    return session
  }

  async function sdkClient() {
    const client = new Client({ name: 'test', version: '1.0.0' })
    await client.connect(new StdioClientTransport({ command: process.execPath, args: [BIN, 'mcp', deployment], stderr: 'pipe' }))
    clients.push(client)
    return client
  }

  /** the abuse a raw session gets, answered as JSON-RPC says; the session stays usable throughout */
  async function abuse(session: RawSession, limit: number) {
    const init = await session.request(1, 'initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } })
    expect(init.result.serverInfo.name).to.equal('faber')
    session.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }))

    session.write('garbage{')
    expect((await session.reply(null, 0)).error).to.deep.include({ code: -32700 })
    session.write('[{"jsonrpc":"2.0","id":2,"method":"ping"}]')
    expect((await session.reply(null, 1)).error.message).to.match(/^Invalid Request: JSON-RPC batches are not supported/)
    session.write('[]')
    expect((await session.reply(null, 2)).error).to.deep.equal({ code: -32600, message: 'Invalid Request: an empty array' })
    session.write('{"jsonrpc":"2.0","id":3}')
    expect((await session.reply(3)).error).to.deep.include({ code: -32600 })
    session.write('{"jsonrpc":"1.0","id":4,"method":"ping"}')
    expect((await session.reply(4)).error).to.deep.equal({ code: -32600, message: 'Invalid Request: "jsonrpc" must be exactly "2.0"' })
    session.write('{"jsonrpc":"2.0","id":5,"method":"ping","params":[1,2]}')
    expect((await session.reply(5)).error).to.deep.include({ code: -32602 })
    session.write('{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}')
    expect((await session.reply(null, 3)).error.message).to.equal('Invalid Request: "id" must be a string or a number')
    session.write('42')
    expect((await session.reply(null, 4)).error).to.deep.include({ code: -32600 })
    expect((await session.request(6, 'no/such/method')).error).to.deep.include({ code: -32601 })
    // params the SDK's schema refuses are the client's mistake (-32602), not an internal error (-32603)
    expect((await session.request(60, 'tools/list', { cursor: { not: 'a string' } })).error).to.deep.equal({
      code: -32602,
      message: 'Invalid params: params.cursor: Invalid input: expected string, received object',
    })
    // a notification is never answered, even a broken one
    session.write('{"jsonrpc":"2.0","method":"notifications/whatever","params":7}')

    // bad arguments are the model's mistake: tool results it can read, not protocol errors
    const notObject = await session.request(7, 'tools/call', { name: 'read', arguments: 5 })
    expect(notObject.result).to.deep.include({ isError: true, _meta: { 'faber/error': { code: 'INVALID_ARGUMENTS' } } })
    session.write(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"read","arguments":{"path":${nested(100_000)}}}}`)
    const deep = await session.reply(8)
    expect(deep.result).to.deep.include({ isError: true, _meta: { 'faber/error': { code: 'INVALID_ARGUMENTS' } } })
    expect(deep.result.content[0].text).to.match(/nest deeper than 256 levels \(at \$\.path\[0\]/)
    expect((await session.request(9, 'tools/call', { arguments: {} })).error).to.deep.include({ code: -32602 })

    // 16 MB: refused with an error naming the size, a line on stderr, and the session goes on
    session.write(JSON.stringify({ jsonrpc: '2.0', method: 'tools/call', params: { name: 'read', arguments: { path: 'x'.repeat(MB16) } }, id: 10 }))
    const big = await session.reply(10)
    expect(big.error.code).to.equal(-32600)
    expect(big.error.message)
      .to.match(/^Invalid Request: a message of 1677\d{4} bytes is over the limit/)
      .and.include(`limit of ${limit} bytes`)
    await session.until(() => (session.stderr.includes(`over the limit of ${limit} bytes`) ? true : undefined))

    const read = await session.request(11, 'tools/call', { name: 'read', arguments: { path: 'notes.txt' } })
    expect(read.result.isError).to.equal(false)
    expect(read.result.content[0].text).to.include('hello')
    expect(session.replies.filter((reply) => reply.id === null)).to.have.length(5)
  }

  it('answers garbage, batches, bad requests and oversized messages as JSON-RPC says, in several sessions at once', async () => {
    const [first, second] = await Promise.all([sdkClient(), sdkClient()])
    // the raw session's limit is raised to 8 MiB by the flag; the SDK clients' sessions keep the default 4 MiB
    const session = rawSession(['--max-message-bytes', String(8 * 1024 * 1024)])
    const sdkTraffic = async (client: Client, n: number) => {
      const deep = await client.callTool({ name: 'read', arguments: { path: JSON.parse(nested(1000)) } })
      expect(deep.isError).to.equal(true)
      expect(text(deep)).to.match(/nest deeper than 256 levels/)
      const oversized = await client.callTool({ name: 'read', arguments: { path: 'y'.repeat(MB16) } }).catch((e: unknown) => e)
      expect(oversized).to.be.instanceOf(McpError)
      expect((oversized as McpError).code).to.equal(-32600)
      const reads = await Promise.all(Array.from({ length: n }, () => client.callTool({ name: 'read', arguments: { path: 'notes.txt' } })))
      for (const read of reads) expect(text(read)).to.include('hello')
    }
    await Promise.all([abuse(session, 8 * 1024 * 1024), sdkTraffic(first, 5), sdkTraffic(second, 5)])
    expect(await session.end()).to.equal(0)
  })
})

describe('faber mcp: a client that writes its requests and closes its side at once', function () {
  this.timeout(60_000)
  let dir: string
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-mcp-eof-'))
    await mkdir(join(dir, 'ws'))
    await writeFile(join(dir, 'ws', 'notes.txt'), 'hello\n')
    await writeFile(join(dir, 'deploy.yml'), DEPLOYMENT)
  })
  after(() => rm(dir, { recursive: true, force: true }))

  it('gets every answer, the last request without its newline included, and then the server exits 0', async () => {
    const session = new RawSession(join(dir, 'deploy.yml'))
    const read = (id: number) => JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'read', arguments: { path: 'notes.txt' } } })
    session.write(
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'pipe', version: '1' } },
      }),
    )
    session.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }))
    session.write(read(2))
    session.write(read(2))
    // a request the client cancels is owed no answer: the server must not wait for one
    session.write(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'write', arguments: { path: 'x.txt', content: 'x' } } }))
    session.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 3 } }))
    session.child.stdin.end(read(4))
    expect(await session.exited, session.stderr).to.equal(0)
    const answered = (id: number) => session.replies.filter((reply) => reply.id === id)
    expect(answered(1)[0].result.serverInfo.name).to.equal('faber')
    expect(answered(2).map((reply) => reply.result.isError)).to.deep.equal([false, false])
    expect(answered(4)[0].result.content[0].text).to.include('hello')
  })
})

describe('faber mcp: usage errors', function () {
  this.timeout(30_000)

  it('exits 2 on a bad --http, --max-message-bytes or --allow-host without --http', async () => {
    const [http, bytes, allow] = await Promise.all([
      faber(['mcp', 'deploy.yml', '--http', 'nonsense']),
      faber(['mcp', 'deploy.yml', '--max-message-bytes', '0']),
      faber(['mcp', 'deploy.yml', '--allow-host', 'example.com']),
    ])
    expect(http.code).to.equal(2)
    expect(http.stderr).to.include('faber mcp: --http takes [HOST:]PORT (e.g. 3000, 127.0.0.1:3000, [::1]:3000), got "nonsense"')
    expect(bytes.code).to.equal(2)
    expect(bytes.stderr).to.include('--max-message-bytes takes a positive whole number of bytes, got "0"')
    expect(allow.code).to.equal(2)
    expect(allow.stderr).to.include('--allow-host only applies with --http')
  })
})

const require = createRequire(import.meta.url)
const inspectorManifest = require.resolve('@modelcontextprotocol/inspector-cli/package.json')
const inspectorBin = join(dirname(inspectorManifest), require(inspectorManifest).bin['mcp-inspector-cli'])

describe('faber mcp --http', function () {
  this.timeout(60_000)
  const served = mcpOverHttp(DEPLOYMENT)
  const httpClient = (answer?: ElicitResult) => served.client(answer)

  it('serves concurrent sessions, each answering its own approvals', async () => {
    const [yes, no, mute] = await Promise.all([httpClient({ action: 'accept', content: { approve: true } }), httpClient({ action: 'decline' }), httpClient()])
    const write = (client: Client, path: string) => client.callTool({ name: 'write', arguments: { path, content: `by ${path}\n` } })
    const [allowed, declined, unasked] = await Promise.all([write(yes, 'yes.txt'), write(no, 'no.txt'), write(mute, 'mute.txt')])
    expect(allowed.isError, text(allowed)).to.equal(false)
    expect(await readFile(join(served.dir, 'ws', 'yes.txt'), 'utf8')).to.equal('by yes.txt\n')
    expect(declined).to.deep.include({ isError: true, _meta: { 'faber/error': { code: 'DENIED' } } })
    expect(unasked).to.deep.include({ isError: true, _meta: { 'faber/error': { code: 'DENIED' } } })
    const reads = await Promise.all([yes, no, mute].map((client) => client.callTool({ name: 'read', arguments: { path: 'notes.txt' } })))
    for (const read of reads) expect(text(read)).to.include('hello')
    expect((await yes.listTools()).tools.map((tool) => tool.name)).to.include.members(['read', 'write'])
  })

  it('refuses a Host or an Origin that is not its own (DNS rebinding)', async () => {
    const init = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'x', version: '1' } },
    })
    const post = (headers: Record<string, string>, body = init) =>
      rawHttp(served.url, { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body)
    const port = new URL(served.url).port
    const evilHost = await post({ host: 'evil.example.com', origin: 'http://evil.example.com' })
    expect(evilHost.status).to.equal(403)
    expect(JSON.parse(evilHost.body).error.message).to.match(/^Forbidden: Host "evil\.example\.com" is not allowed/)
    const evilOrigin = await post({ host: `localhost:${port}`, origin: 'http://evil.example.com' })
    expect(evilOrigin.status).to.equal(403)
    const local = await post({ host: `localhost:${port}`, origin: `http://localhost:${port}` })
    expect(local.status).to.equal(200)
    const garbage = await post({ host: `127.0.0.1:${port}` }, 'garbage{')
    expect(garbage.status).to.equal(400)
    expect(JSON.parse(garbage.body).error.code).to.equal(-32700)
    const batch = await post({ host: `127.0.0.1:${port}` }, '[]')
    expect(JSON.parse(batch.body).error).to.deep.equal({ code: -32600, message: 'Invalid Request: an empty array' })
    const big = await post({ host: `127.0.0.1:${port}` }, 'x'.repeat(5 * 1024 * 1024))
    expect(big.status).to.equal(413)
    expect(served.stderr()).to.include('refused a request body over the limit of 4194304 bytes')
  })

  it('is driven by the MCP inspector CLI', async () => {
    const run = (method: string[]) =>
      new Promise<any>((resolve, reject) => {
        // cwd: the inspector reads its package.json as ../package.json from there (see plugins/mcp/README.md)
        const inspector = spawn(process.execPath, [inspectorBin, '--cli', served.url, '--transport', 'http', ...method], {
          cwd: join(import.meta.dirname),
          stdio: ['ignore', 'pipe', 'pipe'],
        })
        let out = ''
        let err = ''
        inspector.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()))
        inspector.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()))
        inspector.on('close', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`inspector exited ${code}: ${err}`))))
      })
    const read = await run(['--method', 'tools/call', '--tool-name', 'read', '--tool-arg', 'path=notes.txt'])
    expect(read.isError).to.equal(false)
    expect(text(read)).to.include('hello')
  })
})

/** one HTTP request with exactly these headers (fetch will not send a foreign Host) */
async function rawHttp(url: string, headers: Record<string, string>, body: string) {
  const { request } = await import('node:http')
  const target = new URL(url)
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request({ host: target.hostname, port: target.port, path: target.pathname, method: 'POST', headers }, (res) => {
      let text = ''
      res.on('data', (chunk: Buffer) => (text += chunk.toString()))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }))
    })
    req.on('error', reject)
    req.end(body)
  })
}
