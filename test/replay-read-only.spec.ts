// faber replay reaches no network and writes nothing, by construction: a deployment whose tools, store, span exporter,
// MCP client and inspector web view all write or connect when it runs live (each counted here, on real listeners on
// 127.0.0.1 and real files) is replayed, and nothing is written or connected to

import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { createServer, type Server } from 'node:http'
import { type AddressInfo, connect, createServer as createNetServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AgentSession, ScriptedModel, type ScriptStep, SessionLog } from '@faber/agent'
import { compose, type DeploymentSpec, readDeployment, replay } from '@faber/cli'
import ToolRuntime, { assertStarted, defineTool, t } from '@faber/core'
import { serveMcpHttp } from '@faber/plugin-mcp'
import { trace } from '@opentelemetry/api'
import { BasicTracerProvider, type ReadableSpan, SimpleSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base'
import { expect } from 'chai'
import { Context, Logger } from 'cordis'
import { stampPlugin, tree } from '../packages/cli/tests/helpers.ts'

Logger.levels.base = 0

/**
 * a listener on 127.0.0.1 that counts what reaches it: each connection, and each request (a client's pool sends a later
 * request over a connection it keeps open, which makes no new connection)
 */
async function counting(server: Server) {
  const counted = { reached: 0 }
  server.on('connection', () => counted.reached++)
  server.on('request', () => counted.reached++)
  if (!server.listening) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { counted, port: (server.address() as AddressInfo).port }
}

async function freePort() {
  const probe = createNetServer()
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve))
  const { port } = probe.address() as AddressInfo
  await new Promise((resolve) => probe.close(resolve))
  return port
}

/** whether something accepts connections on 127.0.0.1:port */
function listens(port: number) {
  return new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}

const Stamp = stampPlugin()

describe('faber replay: read-only, network included', function () {
  this.timeout(60_000)
  let dir: string
  let mcpServer: Context
  let serving: Awaited<ReturnType<typeof serveMcpHttp>>
  let mcp: { counted: { reached: number }; port: number }
  let collector: { counted: { reached: number }; port: number }
  let collectorServer: Server
  let provider: BasicTracerProvider

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-replay-ro-'))
    await mkdir(join(dir, 'ws'))
    await writeFile(join(dir, 'ws', 'notes.txt'), 'hello\n')
    // an MCP server over streamable HTTP with one tool
    mcpServer = new Context()
    mcpServer.plugin(ToolRuntime, {})
    await mcpServer.start()
    await assertStarted(mcpServer)
    mcpServer.tools.register(
      defineTool({
        name: 'lookup',
        description: 'looks a word up',
        parameters: t.object({ word: t.string() }),
        output: { schema: t.string() },
        execute: async ({ word }) => `${word}: found`,
      }),
    )
    serving = await serveMcpHttp(mcpServer, { port: 0 })
    mcp = await counting(serving.http)
    // a span collector: each exported span is POSTed to it
    collectorServer = createServer((req, res) => {
      req.resume()
      req.on('end', () => res.end())
    })
    collector = await counting(collectorServer)
    const exporter: SpanExporter = {
      export(spans: ReadableSpan[], done: (result: { code: number }) => void) {
        fetch(`http://127.0.0.1:${collector.port}/v1/traces`, { method: 'POST', body: JSON.stringify(spans.map((s) => s.name)) }).then(
          () => done({ code: 0 }),
          () => done({ code: 1 }),
        )
      },
      shutdown: async () => {},
    }
    provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
    trace.disable()
    trace.setGlobalTracerProvider(provider)
  })

  /**
   * resolves once nothing reached either listener for 300 ms: a stopped MCP client still opens one more connection just after
   * it stopped, which must not be taken for the replay's
   */
  async function quiet() {
    let seen: number
    do {
      seen = mcp.counted.reached + collector.counted.reached
      await new Promise((resolve) => setTimeout(resolve, 300))
    } while (seen !== mcp.counted.reached + collector.counted.reached)
  }

  afterEach(async () => {
    trace.disable()
    await provider.shutdown()
    await serving.close()
    await mcpServer.stop()
    await new Promise((resolve) => collectorServer.close(resolve))
    await rm(dir, { recursive: true, force: true })
  })

  function deployment(web: number): DeploymentSpec {
    const spec = readDeployment(
      {
        agents: [{ name: 'main' }],
        plugins: {
          '@faber/store': { path: join(dir, 'state', 'faber.db') },
          '@faber/plugin-tools-fs': { root: join(dir, 'ws') },
          '@faber/plugin-fs-observation': {},
          '@faber/plugin-approval': { policy: 'ask', require: ['stamp'], rules: [{ tool: 'stamp', decision: 'allow' }] },
          '@faber/plugin-mcp': { servers: [{ name: 'kb', url: serving.url }] },
          '@faber/plugin-otel': {},
          '@faber/plugin-tool-cordis': { web: { listen: `127.0.0.1:${web}` } },
        },
      },
      'live.yml',
      dir,
    )
    spec.plugins.push({ key: 'stamp', use: 'stamp', config: { file: join(dir, 'ws', 'stamps.txt') }, plugin: Stamp })
    return spec
  }

  const script: ScriptStep[] = [
    { toolCalls: [{ name: 'read', arguments: { path: 'notes.txt' } }] },
    { toolCalls: [{ name: 'write', arguments: { path: 'notes.txt', content: 'new\n' } }] },
    { toolCalls: [{ name: 'stamp', arguments: { text: 'x' } }] },
    { toolCalls: [{ name: 'kb__lookup', arguments: { word: 'faber' } }] },
    { text: 'done' },
  ]

  it('connects to no MCP server or collector, listens on no port, and leaves every file as it was', async () => {
    const web = await freePort()
    const log = join(dir, 'session.jsonl')
    {
      const deployed = await compose(deployment(web))
      const session = SessionLog.open(log)
      const agent = new AgentSession(deployed.ctx, { model: new ScriptedModel(script), agent: deployed.agents.get('main'), log: await session })
      await agent.send('go')
      // live, the view listens
      expect(await listens(web)).to.equal(true)
      agent.dispose()
      await (await session).close()
      await deployed.stop()
    }
    await provider.forceFlush()
    await quiet()
    // live, each of them wrote or connected
    expect(mcp.counted.reached).to.be.greaterThan(0)
    expect(collector.counted.reached).to.be.greaterThan(0)
    expect(await readFile(join(dir, 'ws', 'stamps.txt'), 'utf8')).to.equal('x\n')
    const before = await tree(dir)
    const counts = { mcp: mcp.counted.reached, collector: collector.counted.reached }

    let listening: boolean | undefined
    const report = await replay([log], deployment(web), {
      hold: async () => {
        listening = await listens(web)
      },
    })
    await provider.forceFlush()
    expect(report.summary).to.include({ replayed: 4, unchanged: 4, unknown: 0 })
    expect(listening).to.equal(false)
    expect({ mcp: mcp.counted.reached, collector: collector.counted.reached }).to.deep.equal(counts)
    expect(await tree(dir)).to.deep.equal(before)
  })

  it('the MCP tools come from the calls recorded, so a new rule on them is replayed; no server is connected to or started', async () => {
    const log = join(dir, 'session.jsonl')
    {
      const deployed = await compose(deployment(await freePort()))
      const session = await SessionLog.open(log)
      await new AgentSession(deployed.ctx, { model: new ScriptedModel(script), agent: deployed.agents.get('main'), log: session }).send('go')
      await session.close()
      await deployed.stop()
    }
    await quiet()
    const counted = mcp.counted.reached
    const stricter = deployment(await freePort())
    // and a server the client would start as a process, which leaves a mark when it starts
    const marker = join(dir, 'started')
    const mcpConfig = stricter.plugins.find((p) => p.key === '@faber/plugin-mcp')!.config as { servers: object[] }
    mcpConfig.servers.push({ name: 'local', command: process.execPath, args: ['-e', `require('node:fs').writeFileSync(${JSON.stringify(marker)}, 'started')`] })
    stricter.plugins.push({
      key: '@faber/plugin-guards',
      use: '@faber/plugin-guards',
      config: { deny: [{ name: 'no-kb', tools: ['kb__lookup'], argument: '$.word', pattern: '.', reason: 'the knowledge base is offline' }] },
    })
    const report = await replay([log], stricter)
    expect(report.changes.map((c) => [c.name, c.old.verdict, c.new.verdict, c.new.plugin])).to.deep.equal([['kb__lookup', 'allow', 'deny', 'guards']])
    expect(mcp.counted.reached).to.equal(counted)
    expect(existsSync(marker), 'the stdio server was started').to.equal(false)
  })

  it('refuses, by name and line, a plugin that does not say what it does in a replay', async () => {
    const spec = readDeployment({ agents: [{ name: 'main' }], plugins: { '@faber/plugin-tools-fs': { root: join(dir, 'ws') } } }, 'mine.yml', dir)
    spec.plugins.push({ key: './reporter.js', use: './reporter.js', config: {}, plugin: { name: 'reporter', apply: () => {} } })
    const log = join(dir, 'session.jsonl')
    await writeFile(log, `${JSON.stringify({ type: 'session', version: 2, id: 's', agent: 'main', model: 'm', at: 1 })}\n`)
    const error = await replay([log], spec).catch((caught) => caught)
    expect(error?.name).to.equal('DeploymentError')
    expect(error.message).to.match(/mine\.yml: plugins\["\.\/reporter\.js"\]: "\.\/reporter\.js" does not say what it does in a replay.*replay: 'inert'/)
  })
})
