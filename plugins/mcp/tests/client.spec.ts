import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer as createHttpServer } from 'node:http'
import { type AddressInfo, createServer } from 'node:net'
import { join } from 'node:path'
import { mock } from 'node:test'
import { assertStarted, createAgent, type ToolResult } from '@faber/core'
import { call, deployment, disposeAll, gone } from '@faber/core/testing'
import WorkerSandbox from '@faber/sandbox'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'
import * as mcp from '../src/index.ts'
import { serverScript } from './fixtures/servers.ts'
import { fixtureServer, nextStatus, npmServer, tempDir, whenDispatched } from './helpers.ts'

async function load(ctx: Context, config: mcp.ConfigInput) {
  const fork = ctx.plugin(mcp, config)
  await assertStarted(ctx)
  return fork
}

describe('mcp client: the npm servers', function () {
  // three npm MCP servers start as child processes: slow on a loaded CI machine
  this.timeout(90_000)
  const dir = tempDir()
  let ctx: Context

  before(async () => {
    ctx = await deployment({ mode: 'both' })
    ctx.plugin(WorkerSandbox, { poolSize: 1 })
    await load(ctx, { servers: [npmServer('everything', dir), npmServer('filesystem', dir, { prefix: 'fs.' }), npmServer('memory', dir)] })
  })
  after(disposeAll)

  it('registers every tool under a per-server prefix', () => {
    const names = ctx.tools.schemas().map((s) => s.name)
    expect(names).to.include.members([
      'everything__echo',
      'everything__get-sum',
      'fs.read_text_file',
      'fs.write_file',
      'memory__read_graph',
      'memory__create_entities',
    ])
    // a task-only tool cannot be called with tools/call, so it is left out
    expect(names).not.to.include('everything__simulate-research-query')
  })

  it('keeps input schemas and types outputs where the server declares them', () => {
    const write = ctx.tools.schemas().find((s) => s.name === 'fs.write_file')!
    expect(write.parameters).to.deep.include({ type: 'object', required: ['path', 'content'] })
    expect(write.parameters).not.to.have.property('$schema')
    const sdk = ctx.tools.sdkDeclarations()
    // read_graph, open_nodes and search_nodes share one output type, declared once
    expect(sdk).to.match(/type Memory\w+Output = \{\n {2}entities: \{/)
    expect(sdk).to.match(/memory__read_graph\(args\?: Record<string, unknown>\): Promise<Memory\w+Output>/)
    expect(sdk).to.match(/ {2}everything__echo\(args: \{\n[\s\S]*?\n {2}\}\): Promise<unknown>\n/)
  })

  it('maps MCP annotations onto Faber hints', () => {
    expect(ctx.tools.get('fs.write_file')!.annotations).to.deep.equal({ readOnly: false, destructive: true, idempotent: true, openWorld: false })
    expect(ctx.tools.get('memory__read_graph')!.annotations).to.include({ readOnly: true })
  })

  it('calls tools natively, rendering the MCP content', async () => {
    const echo = await call(ctx, 'everything__echo', { message: 'hi' })
    expect(echo).to.include({ isError: false, value: 'Echo: hi', content: 'Echo: hi' })
    const file = join(dir, 'a.txt')
    const write = await call(ctx, 'fs.write_file', { path: file, content: 'hello' })
    expect(write.isError).to.equal(false)
    expect(readFileSync(file, 'utf8')).to.equal('hello')
    const read = await call(ctx, 'fs.read_text_file', { path: file })
    expect(read).to.deep.include({ value: { content: 'hello' }, content: 'hello' })
    const image = await call(ctx, 'everything__get-tiny-image', {})
    expect(image.content).to.match(/\[image image\/png, \d+ bytes\]/)
  })

  it('validates arguments against the imported schema before the server sees them', async () => {
    const result = await call(ctx, 'everything__get-sum', { a: 1 })
    expect(result.isError && result.error.code).to.equal('INVALID_ARGUMENTS')
  })

  it('turns a tool error into TOOL_FAILED with the server text', async () => {
    const result = await call(ctx, 'fs.read_text_file', { path: '/etc/hostname' })
    expect(result.isError && result.error).to.include({ code: 'TOOL_FAILED', toolCode: 'MCP_TOOL_ERROR' })
    expect(result.content).to.match(/Access denied - path outside allowed directories/)
  })

  it('calls them from run_code programs', async () => {
    const code = [
      `await tools['fs.write_file']({ path: ${JSON.stringify(join(dir, 'b.txt'))}, content: 'from code' })`,
      `const [sum, file] = await Promise.all([tools['everything__get-sum']({ a: 2, b: 3 }), tools['fs.read_text_file']({ path: ${JSON.stringify(join(dir, 'b.txt'))} })])`,
      `await tools.memory__create_entities({ entities: [{ name: 'faber', entityType: 'project', observations: ['speaks MCP'] }] })`,
      'const graph = await tools.memory__search_nodes({ query: "faber" })',
      'return { sum, text: file.content, entities: graph.entities.map((e) => e.name) }',
    ].join('\n')
    const result = await call(ctx, 'run_code', { code, description: 'uses three servers' })
    expect(result.isError === false && result.value, result.content).to.deep.equal({
      logs: [],
      result: { sum: 'The sum of 2 and 3 is 5.', text: 'from code', entities: ['faber'] },
    })
  })
})

describe('mcp client: policies', () => {
  afterEach(disposeAll)

  it('applies guards and listeners to server tools, direct and nested', async () => {
    const dir = tempDir()
    const ctx = await deployment({ mode: 'both' })
    ctx.plugin(WorkerSandbox, { poolSize: 1 })
    ctx.tools.guard((exec) => (exec.tool.annotations.destructive ? `"${exec.name}" is destructive` : undefined))
    ctx.on('tools/pre-execute', (exec) => (exec.name === 'filesystem__list_allowed_directories' ? { kind: 'deny', reason: 'not today' } : undefined))
    await load(ctx, { servers: [npmServer('filesystem', dir)] })
    const file = join(dir, 'x.txt')
    const direct = await call(ctx, 'filesystem__write_file', { path: file, content: 'x' })
    expect(direct.isError && direct.error).to.deep.include({ code: 'DENIED', message: '"filesystem__write_file" is destructive' })
    const listed = await call(ctx, 'filesystem__list_allowed_directories', {})
    expect(listed.isError && listed.error.deniedBy).to.deep.equal({ stage: 'pre-execute', plugin: 'root' })
    const code = `try { await tools.filesystem__write_file({ path: ${JSON.stringify(file)}, content: 'x' }) } catch (e) { return e.message }`
    const nested = await call(ctx, 'run_code', { code, description: 'tries a write' })
    expect(nested.isError === false && nested.value).to.deep.equal({ logs: [], result: '"filesystem__write_file" is destructive' })
  })
})

describe('mcp client: a plugin that throws what cannot be turned into text', () => {
  afterEach(disposeAll)

  it('registers its tools and becomes ready though a tools/changed listener throws a value with no prototype', async () => {
    const ctx = await deployment({ mode: 'native' })
    const warnings: string[] = []
    const target = { levels: { base: 2 }, record: (record: { type: string; content: string }) => record.type === 'warn' && warnings.push(record.content) }
    Logger.targets.push(target as never)
    try {
      // every registration tells this listener, and it throws a value String() cannot read. core hears each listener
      // apart from the others, so the registration stands (once, it made register throw: the client then warned that
      // it "could not register" the tool, through messageOf, since String() of that value throws in turn)
      ctx.plugin({
        name: 'hostile-listener',
        apply: (c: Context) =>
          c.on('tools/changed', () => {
            throw Object.create(null)
          }),
      })
      const settled = nextStatus(ctx, 'odd', (s) => s.state !== 'connecting')
      await load(ctx, { servers: [fixtureServer('odd', 'odd-server.ts')] })
      expect(await settled).to.deep.include({ state: 'ready' })
      expect(ctx.tools.get('odd__hang')).to.not.equal(undefined)
      expect(warnings.filter((w) => w.includes('could not register'))).to.deep.equal([])
      const ignored = warnings.filter((w) => w.startsWith('a tools/changed listener of plugin "hostile-listener" threw (ignored)'))
      expect(ignored).to.have.length.above(0)
      for (const warning of ignored) expect(warning).to.match(/: an error that could not be shown$/)
    } finally {
      Logger.targets.splice(Logger.targets.indexOf(target as never), 1)
    }
  })
})

describe('mcp client: schemas outside the subset, names, list changes, timeouts', () => {
  // the budget of every request to the fixture; the timeout test runs on fake timers, so this costs no wall time
  const timeoutMs = 5000
  let ctx: Context

  before(async () => {
    ctx = await deployment({ mode: 'native' })
    await load(ctx, { servers: [fixtureServer('odd', 'odd-server.ts', { timeoutMs })] })
  })
  after(disposeAll)

  async function stats(): Promise<{ started: number; cancelled: number }> {
    const result = await call(ctx, 'odd__stats', {})
    if (result.isError) throw new Error(result.content)
    return JSON.parse(result.value as string)
  }

  /** until the server runs one more hang call: each round trip is answered after the requests sent before it */
  async function hangStarted(before: number) {
    while ((await stats()).started === before);
  }

  it('keeps a tool whose schemas use unsupported constructs, typed unknown there', async () => {
    const tool = ctx.tools.schemas().find((s) => s.name === 'odd__odd_schema')!
    const properties = tool.parameters.properties!
    expect(properties.at).to.deep.equal({
      type: 'object',
      properties: { x: { type: 'number' }, y: { type: 'number' } },
      required: ['x', 'y'],
      description: 'where',
    })
    expect(properties.both).to.deep.equal({})
    expect(properties.not_five).to.deep.equal({})
    expect(properties.pair).to.deep.equal({})
    expect(properties.code).to.deep.equal({})
    expect(properties.tree).to.deep.equal({})
    expect(ctx.tools.sdkDeclarations()).to.include('Promise<{ echoed: unknown }>')
    const result = await call(ctx, 'odd__odd_schema', { at: { x: 1, y: 2 }, not_five: 6 })
    expect(result.isError === false && result.value).to.deep.equal({ echoed: { at: { x: 1, y: 2 }, not_five: 6 } })
  })

  it('rewrites names Faber does not allow', async () => {
    const result = await call(ctx, 'odd__has_space_', {})
    expect(result.isError === false && result.value).to.equal('"has space!"')
  })

  it('re-registers on tools/list_changed, and reports only a list that changed', async () => {
    const seen: mcp.McpStatus[] = []
    const dispose = ctx.on('mcp/status', (status) => void seen.push(status))
    const grown = nextStatus(ctx, 'odd', (s) => s.tools.includes('odd__extra_6'))
    // both announcements are re-listed in the order they came, so the first is settled when the second reports
    await call(ctx, 'odd__announce', {})
    await call(ctx, 'odd__grow', {})
    await grown
    dispose()
    expect(ctx.tools.get('odd__extra_6')?.description).to.equal('Added at run time.')
    expect(seen.map((s) => [s.state, s.tools.length])).to.deep.equal([['ready', 7]])
  })

  it('cancels the MCP request when the call is aborted', async () => {
    const before = await stats()
    const controller = new AbortController()
    const pending = call(ctx, 'odd__hang', {}, { signal: controller.signal })
    await hangStarted(before.started)
    controller.abort()
    const result = await pending
    expect(result.isError && result.error.code).to.equal('ABORTED')
    // the cancellation was sent before this request, and the server handles them in order
    expect(await stats()).to.deep.equal({ started: before.started + 1, cancelled: before.cancelled + 1 })
  })

  it('reports a timeout as TOOL_FAILED and keeps a server that still answers pings', async () => {
    const seen: mcp.McpStatus[] = []
    const dispose = ctx.on('mcp/status', (status) => void seen.push(status))
    const before = await stats()
    mock.timers.enable({ apis: ['setTimeout'] })
    let result: ToolResult
    try {
      const pending = call(ctx, 'odd__hang', {})
      await hangStarted(before.started)
      mock.timers.tick(timeoutMs)
      result = await pending
    } finally {
      mock.timers.reset()
    }
    expect(result.isError && result.error).to.deep.include({ code: 'TOOL_FAILED', toolCode: 'MCP_TIMEOUT' })
    expect(result.content).to.include(`did not answer within ${timeoutMs} ms`)
    // the ping sent on the timeout is answered before this call, so the server was kept if this call runs on it
    const after = await call(ctx, 'odd__has_space_', {})
    expect(after.isError).to.equal(false)
    dispose()
    expect(seen).to.deep.equal([])
  })
})

describe('mcp client: a server that dies', () => {
  afterEach(disposeAll)

  it('fails the call in flight clearly and restarts the server', async () => {
    const dir = tempDir()
    const ctx = await deployment({ mode: 'native' })
    const seen: mcp.McpStatus[] = []
    ctx.on('mcp/status', (status) => void seen.push(status))
    const ready = nextStatus(ctx, 'everything', (s) => s.state === 'ready')
    await load(ctx, { servers: [npmServer('everything', dir)], restart: { initialDelayMs: 50, maxDelayMs: 1000, maxAttempts: 3, stableMs: 60000 } })
    const { pid } = await ready
    expect(pid).to.be.a('number')
    const sent = whenDispatched(ctx, 'everything__trigger-long-running-operation')
    const long = call(ctx, 'everything__trigger-long-running-operation', { duration: 5, steps: 5 })
    await sent
    // answered after the server took the long call, which is now in flight
    const before = await call(ctx, 'everything__echo', { message: 'before' })
    expect(before.isError === false && before.value).to.equal('Echo: before')

    const killedAt = seen.length
    const restarting = nextStatus(ctx, 'everything', (s) => s.state === 'restarting')
    process.kill(pid!, 'SIGKILL')
    expect(await restarting).to.deep.include({ attempt: 1, pid: undefined })
    // asked in the turn that reported the loss: the restart is at least a timer and a process start away
    const back = nextStatus(ctx, 'everything', (s) => s.state === 'ready')
    const down = await call(ctx, 'everything__echo', { message: 'x' })
    expect(down.isError && down.error.toolCode).to.equal('MCP_SERVER_UNAVAILABLE')
    const result = await long
    expect(result.isError && result.error).to.deep.include({ code: 'TOOL_FAILED', toolCode: 'MCP_SERVER_EXITED' })
    expect(result.content).to.include('MCP server "everything" exited while the call ran; it is being restarted')

    const restarted = await back
    expect(restarted.pid).to.be.a('number').and.not.equal(pid)
    expect(restarted.attempt).to.equal(1)
    // nothing reported after the kill speaks for the dead process
    expect(seen.slice(killedAt).map((s) => s.pid)).not.to.include(pid)
    const echo = await call(ctx, 'everything__echo', { message: 'again' })
    expect(echo.isError === false && echo.value).to.equal('Echo: again')
  })

  it('counts one restart for a server that dies while its tools are listed', async () => {
    // notes each start, answers the handshake, then exits on tools/list
    const starts = join(tempDir(), 'starts')
    const script = [
      "require('fs').appendFileSync(process.argv[1], 'x')",
      "require('readline').createInterface({ input: process.stdin }).on('line', (line) => {",
      '  const m = JSON.parse(line)',
      "  if (m.method === 'tools/list') process.exit(1)",
      "  if (m.method === 'initialize') process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'dies', version: '1' } } }) + '\\n')",
      '})',
    ].join('\n')
    const ctx = await deployment({ mode: 'native' })
    const seen: mcp.McpStatus[] = []
    ctx.on('mcp/status', (status) => void seen.push(status))
    const failed = nextStatus(ctx, 'dies', (s) => s.state === 'failed')
    await load(ctx, {
      servers: [{ name: 'dies', command: process.execPath, args: ['-e', script, starts] }],
      restart: { initialDelayMs: 5, maxDelayMs: 20, maxAttempts: 2, stableMs: 60000 },
    })
    await failed
    // the first start and two restarts, each death counted once
    expect(readFileSync(starts, 'utf8')).to.equal('xxx')
    expect(seen.map((s) => [s.state, s.attempt])).to.deep.equal([
      ['restarting', 1],
      ['restarting', 2],
      ['failed', 2],
    ])
    expect(seen[2].error).to.match(/^the server closed the connection/)
  })

  it('gives up after the configured attempts, without throwing', async () => {
    const ctx = await deployment({ mode: 'native' })
    const failed = nextStatus(ctx, 'broken', (s) => s.state === 'failed')
    await load(ctx, {
      servers: [{ name: 'broken', command: process.execPath, args: ['-e', 'process.exit(3)'] }],
      restart: { initialDelayMs: 5, maxDelayMs: 20, maxAttempts: 2, stableMs: 60000 },
    })
    const status = await failed
    expect(status).to.deep.include({ attempt: 2, tools: [] })
    expect(status.error).to.match(/could not connect/)
  })
})

describe('mcp client: streamable HTTP', () => {
  afterEach(disposeAll)

  it('imports and calls the tools of a server at a URL', async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, () => {
        const { port } = probe.address() as AddressInfo
        probe.close(() => resolve(port))
      })
    })
    const child = spawn(process.execPath, [serverScript('everything'), 'streamableHttp'], {
      env: { ...process.env, PORT: String(port) },
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    try {
      let stderr = ''
      await new Promise<void>((resolve, reject) => {
        child.stderr.on('data', (chunk: Buffer) => {
          stderr += chunk.toString()
          if (stderr.includes('listening on port')) resolve()
        })
        child.once('exit', (code) => reject(new Error(`server-everything exited with ${code}: ${stderr}`)))
      })
      const ctx = await deployment({ mode: 'native' })
      await load(ctx, { servers: [{ name: 'web', url: `http://127.0.0.1:${port}/mcp` }] })
      const echo = await call(ctx, 'web__echo', { message: 'over http' })
      expect(echo.isError === false && echo.value).to.equal('Echo: over http')
    } finally {
      child.kill()
    }
  })
})

describe('mcp client: streamable HTTP, ending the session', () => {
  afterEach(disposeAll)

  it('ends its MCP session with the server when disposed, and sends nothing after', async () => {
    // a server that records every request: enough MCP to connect and list one tool
    const seen: string[] = []
    let streams = 0
    const server = createHttpServer((req, res) => {
      let body = ''
      req.on('data', (chunk: Buffer) => (body += chunk.toString()))
      req.on('end', () => {
        const message = body ? (JSON.parse(body) as { id?: number; method: string; params?: { protocolVersion?: string } }) : undefined
        seen.push([req.method, message?.method, req.headers['mcp-session-id'] ?? '-'].filter(Boolean).join(' '))
        if (req.method === 'GET') {
          streams++
          res.writeHead(200, { 'content-type': 'text/event-stream' }).write(': open\n\n')
          res.on('close', () => streams--)
          return
        }
        if (req.method === 'DELETE' || message?.id === undefined) return void res.writeHead(req.method === 'DELETE' ? 200 : 202).end()
        const result =
          message.method === 'initialize'
            ? { protocolVersion: message.params?.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'recording', version: '1' } }
            : message.method === 'tools/list'
              ? { tools: [{ name: 'noop', inputSchema: { type: 'object' } }] }
              : {}
        res
          .writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'session-1' })
          .end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }))
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      const ctx = await deployment({ mode: 'native' })
      const ready = nextStatus(ctx, 'rec', (s) => s.state === 'ready')
      const fork = await load(ctx, { servers: [{ name: 'rec', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp` }] })
      await ready
      expect(seen).to.include('POST tools/list session-1')
      fork.dispose()
      for (const until = Date.now() + 10000; (!seen.includes('DELETE session-1') || streams > 0) && Date.now() < until; )
        await new Promise((resolve) => setTimeout(resolve, 10))
      expect({ ended: seen.includes('DELETE session-1'), streams }, seen.join(', ')).to.deep.equal({ ended: true, streams: 0 })
      const count = seen.length
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(seen.slice(count), 'requests after the session ended').to.deep.equal([])
      expect(seen.at(-1)).to.equal('DELETE session-1')
    } finally {
      server.closeAllConnections()
      server.close()
    }
  })
})

describe('mcp client: scopes and disposal', () => {
  afterEach(disposeAll)

  it('loads per agent, each agent seeing only its servers', async () => {
    const dir = tempDir()
    const ctx = await deployment({ mode: 'native' })
    const a = createAgent(ctx, { name: 'a' })
    const b = createAgent(ctx, { name: 'b' })
    a.ctx.plugin(mcp, { servers: [npmServer('memory', dir)] })
    b.ctx.plugin(mcp, { servers: [npmServer('everything', dir)] })
    await assertStarted(ctx)
    expect(ctx.tools.get('memory__read_graph', a)).to.not.equal(undefined)
    expect(ctx.tools.get('memory__read_graph', b)).to.equal(undefined)
    expect(ctx.tools.get('everything__echo', b)).to.not.equal(undefined)
    expect(ctx.tools.get('everything__echo')).to.equal(undefined)
  })

  it('closes the servers and removes their tools when disposed', async () => {
    const dir = tempDir()
    const ctx = await deployment({ mode: 'native' })
    const ready = nextStatus(ctx, 'memory', (s) => s.state === 'ready')
    const fork = await load(ctx, { servers: [npmServer('memory', dir)] })
    const { pid } = await ready
    expect(ctx.tools.schemas()).to.have.length(9)
    fork.dispose()
    expect(ctx.tools.schemas()).to.have.length(0)
    // a deadline well past the SDK's own (stdin closed, 2 s, SIGTERM, 2 s, SIGKILL)
    expect(await gone(pid!, 10000)).to.equal(true)
  })
})
