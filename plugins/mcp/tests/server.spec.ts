import { join } from 'node:path'
import { createAgent, defineTool, t } from '@faber/core'
import { call, deployment, disposeAll } from '@faber/core/testing'
import Approval from '@faber/plugin-approval'
import WorkerSandbox from '@faber/sandbox'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js'
import { type ElicitRequest, ElicitRequestSchema, type ElicitResult, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js'
import { expect } from 'chai'
import type { Context } from 'cordis'
import { serveMcp } from '../src/index.ts'
import { repoRoot, tempDir, within } from './helpers.ts'

type Elicit = (request: ElicitRequest) => ElicitResult

/** the official SDK client connected to the fixture deployment, served over stdio by a child process */
async function connect(mode: string, options: { agent?: string; elicit?: Elicit } = {}) {
  const dir = tempDir()
  const args = ['--import', 'tsx', join(import.meta.dirname, 'fixtures/serve.ts'), mode, ...(options.agent ? [options.agent] : [])]
  const transport = new StdioClientTransport({
    command: process.execPath,
    args,
    cwd: repoRoot,
    stderr: 'pipe',
    env: { MEMORY_FILE_PATH: join(dir, 'memory.jsonl') },
  })
  const client = new Client({ name: 'test', version: '1.0.0' }, { capabilities: options.elicit ? { elicitation: {} } : {} })
  if (options.elicit) client.setRequestHandler(ElicitRequestSchema, options.elicit)
  await client.connect(transport)
  clients.add(client)
  return client
}

const clients = new Set<Client>()
async function closeAll() {
  const open = [...clients]
  clients.clear()
  await Promise.all(open.map((client) => client.close()))
}

function text(result: Awaited<ReturnType<Client['callTool']>>) {
  return (result.content as { text: string }[]).map((part) => part.text).join('\n')
}

const MEMORY_TOOLS = [
  'memory__add_observations',
  'memory__create_entities',
  'memory__create_relations',
  'memory__delete_entities',
  'memory__delete_observations',
  'memory__delete_relations',
  'memory__open_nodes',
  'memory__read_graph',
  'memory__search_nodes',
]

describe('mcp server: native', function () {
  // each suite starts `faber mcp` and, under it, three npm MCP servers: slow on a loaded CI machine
  this.timeout(90_000)
  let client: Client
  before(async () => (client = await connect('native')))
  after(closeAll)

  it('lists every visible tool and no run_code', async () => {
    const { tools } = await client.listTools()
    expect(tools.map((tool) => tool.name)).to.deep.equal(['add', ...MEMORY_TOOLS, 'read_secret', 'wipe'])
    const add = tools.find((tool) => tool.name === 'add')!
    expect(add).to.deep.include({ description: 'Adds two numbers.', annotations: { readOnlyHint: true } })
    expect(add.inputSchema).to.deep.include({ type: 'object', required: ['a', 'b'] })
  })

  it('runs calls through the pipeline', async () => {
    const result = await client.callTool({ name: 'add', arguments: { a: 2, b: 40 } })
    expect(result).to.deep.include({ isError: false, structuredContent: { sum: 42 } })
    expect(text(result)).to.equal('42')
    const invalid = await client.callTool({ name: 'add', arguments: { a: 'two' } })
    expect(invalid.isError).to.equal(true)
    expect(text(invalid)).to.match(/^Error: invalid arguments for "add"/)
  })

  it('answers a denied call with an MCP tool error', async () => {
    const result = await client.callTool({ name: 'read_secret', arguments: {} })
    expect(result).to.deep.include({ isError: true, _meta: { 'faber/error': { code: 'DENIED' } } })
    expect(text(result)).to.equal('Error: secrets are not served over MCP')
  })

  it('denies an ask when the client cannot elicit and no approver is mounted', async () => {
    const result = await client.callTool({ name: 'wipe', arguments: { store: 'a' } })
    expect(result.isError).to.equal(true)
    expect(text(result)).to.match(/needs approval \(wipe destroys data\) but no approver answered/)
  })
})

describe('mcp server: code mode', function () {
  // each suite starts `faber mcp` and, under it, three npm MCP servers: slow on a loaded CI machine
  this.timeout(90_000)
  const asked: ElicitRequest[] = []
  let answer: ElicitResult = { action: 'accept', content: { approve: true } }
  let client: Client
  before(
    async () =>
      (client = await connect('code', {
        elicit: (request) => {
          asked.push(request)
          return answer
        },
      })),
  )
  after(closeAll)

  it('lists only run_code, described with the code-only rule and the SDK', async () => {
    const { tools } = await client.listTools()
    expect(tools.map((tool) => tool.name)).to.deep.equal(['run_code'])
    const description = tools[0].description!
    expect(description).to.match(/^Run a TypeScript program/)
    expect(description).to.include('## How to call tools here')
    expect(description).to.include('## The tools SDK')
    expect(description).to.include('memory__read_graph(args?: Record<string, unknown>): Promise<')
    // self-contained for an MCP client: nothing points at a system prompt it does not have
    expect(description).not.to.match(/system prompt|this prompt/)
    expect(description.indexOf('How to call tools here')).to.be.lessThan(description.indexOf('The tools SDK'))
  })

  it('rejects a direct call to a collapsed tool with the route message', async () => {
    const result = await client.callTool({ name: 'add', arguments: { a: 1, b: 2 } })
    expect(result).to.deep.include({ isError: true, _meta: { 'faber/error': { code: 'UNKNOWN_TOOL' } } })
    expect(text(result)).to.equal(
      'Error: unknown tool "add": under code mode only run_code can be called directly; call tools.add(...) inside a run_code program',
    )
  })

  it('runs a program that uses several tools', async () => {
    const code = [
      'const { sum } = await tools.add({ a: 20, b: 22 })',
      "await tools.memory__create_entities({ entities: [{ name: 'answer', entityType: 'number', observations: [String(sum)] }] })",
      "const found = await tools.memory__search_nodes({ query: 'answer' })",
      "console.log('found ' + found.entities.length)",
      'return found.entities[0].observations[0]',
    ].join('\n')
    const result = await client.callTool({ name: 'run_code', arguments: { code, description: 'stores and finds the answer' } })
    expect(result.isError, text(result)).to.equal(false)
    expect(result.structuredContent).to.deep.equal({ logs: ['found 1'], result: '42' })
    expect(text(result)).to.equal('found 1\n42')
  })

  it('applies policies to nested calls', async () => {
    const code = "try { return await tools.read_secret({}) } catch (e) { return e.code + ': ' + e.message }"
    const result = await client.callTool({ name: 'run_code', arguments: { code, description: 'tries the secret' } })
    expect(result.structuredContent).to.deep.equal({ logs: [], result: 'DENIED: secrets are not served over MCP' })
  })

  it('asks the client by elicitation when a nested call needs approval', async () => {
    answer = { action: 'accept', content: { approve: true } }
    const code = "return await tools.wipe({ store: 'cache' })"
    const allowed = await client.callTool({ name: 'run_code', arguments: { code, description: 'wipes the cache' } })
    expect(allowed.structuredContent).to.deep.equal({ logs: [], result: 'wiped cache' })
    expect(asked).to.have.length(1)
    expect(asked[0].params.message).to.include('Allow the call to "wipe"? It needs approval: wipe destroys data')
    expect(asked[0].params.message).to.include(code)

    answer = { action: 'decline' }
    const declined = await client.callTool({ name: 'run_code', arguments: { code: `try { ${code} } catch (e) { return e.code }`, description: 'wipes again' } })
    expect(declined.structuredContent).to.deep.equal({ logs: [], result: 'DENIED' })
    expect(asked).to.have.length(2)
  })
})

describe('mcp server: both and agent views', function () {
  // each suite starts `faber mcp` and, under it, three npm MCP servers: slow on a loaded CI machine
  this.timeout(90_000)
  afterEach(closeAll)

  it('under both, lists the tools and run_code, without the code-only rule', async () => {
    const client = await connect('both')
    const { tools } = await client.listTools()
    expect(tools.map((tool) => tool.name)).to.deep.equal(['add', ...MEMORY_TOOLS, 'read_secret', 'run_code', 'wipe'])
    const runCode = tools.find((tool) => tool.name === 'run_code')!
    expect(runCode.description).to.include('## The tools SDK').and.not.include('## How to call tools here')
    const direct = await client.callTool({ name: 'add', arguments: { a: 1, b: 1 } })
    expect(direct.structuredContent).to.deep.equal({ sum: 2 })
  })

  it("serves one agent's view", async () => {
    const client = await connect('native', { agent: 'ops' })
    const { tools } = await client.listTools()
    expect(tools.map((tool) => tool.name)).to.deep.equal(['run_code'])
    const direct = await client.callTool({ name: 'memory__read_graph', arguments: {} })
    expect(text(direct)).to.match(/^Error: unknown tool "memory__read_graph": under code mode only run_code/)
  })
})

describe('mcp server: in process', () => {
  afterEach(disposeAll)

  async function linked(ctx: Context, agent?: string, elicit?: Elicit) {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair()
    const serving = await serveMcp(ctx, { transport: serverSide, agent })
    const client = new Client({ name: 'test', version: '1.0.0' }, { capabilities: elicit ? { elicitation: {} } : {} })
    if (elicit) client.setRequestHandler(ElicitRequestSchema, elicit)
    await client.connect(clientSide)
    return { client, serving }
  }

  const ping = defineTool({
    name: 'ping',
    description: 'Answers pong.',
    parameters: t.object({}),
    output: { schema: t.string() },
    execute: () => 'pong',
  })

  it('lists exactly what wire(agent) shows', async () => {
    const ctx = await deployment({ mode: 'both' })
    ctx.tools.register(ping)
    const agent = createAgent(ctx, { name: 'x' })
    agent.ctx.tools.presentAs('native')
    const { client, serving } = await linked(ctx, 'x')
    const { tools } = await client.listTools()
    const wire = ctx.tools.wire(agent).tools
    expect(tools.map(({ name, description, inputSchema }) => ({ name, description, parameters: inputSchema }))).to.deep.equal(wire)
    await serving.close()
  })

  it('notifies the client when the served view changes', async () => {
    const ctx = await deployment({ mode: 'native' })
    const { client, serving } = await linked(ctx)
    expect((await client.listTools()).tools).to.deep.equal([])
    const changed = new Promise<void>((resolve) => client.setNotificationHandler(ToolListChangedNotificationSchema, () => resolve()))
    ctx.tools.register(ping)
    await changed
    expect((await client.listTools()).tools.map((tool) => tool.name)).to.deep.equal(['ping'])
    await serving.close()
  })

  it('aborts the execution when the client cancels the request', async () => {
    const ctx = await deployment({ mode: 'native' })
    let running!: () => void
    const started = new Promise<void>((resolve) => (running = resolve))
    let stopped!: () => void
    const aborted = new Promise<void>((resolve) => (stopped = resolve))
    ctx.tools.register(
      defineTool({
        name: 'wait',
        description: 'Waits until cancelled.',
        parameters: t.object({}),
        output: { schema: t.string() },
        execute: (_, run) =>
          new Promise<string>((resolve) => {
            run.signal.addEventListener('abort', () => {
              stopped()
              resolve('stopped')
            })
            running()
          }),
      }),
    )
    const { client, serving } = await linked(ctx)
    const controller = new AbortController()
    const call = client.callTool({ name: 'wait', arguments: {} }, undefined, { signal: controller.signal })
    // cancel once the tool runs, so it is the running execution that must be aborted
    await within(started, 'the tool starting')
    controller.abort()
    const error = await call.then(
      () => undefined,
      (e: unknown) => e,
    )
    expect(error).to.be.instanceOf(Error)
    await within(aborted, "the execution's signal firing")
    await serving.close()
  })

  it("answers @faber/plugin-approval's requests by elicitation, after its rules", async () => {
    const ctx = await deployment({ mode: 'native' }, (ctx) =>
      ctx.plugin(Approval, { require: ['ping', 'pong'], rules: [{ tool: 'pong', decision: 'reject' }] }),
    )
    ctx.tools.register(ping)
    ctx.tools.register({ ...ping, name: 'pong' })
    const decided: string[] = []
    ctx.on('approval/decided', (event) => decided.push(`${event.tool}: ${event.outcome} by ${event.answeredBy}`))
    const asked: string[] = []
    const { client, serving } = await linked(ctx, undefined, (request) => {
      asked.push(request.params.message)
      return { action: 'accept', content: { approve: true } }
    })
    const allowed = await client.callTool({ name: 'ping', arguments: {} })
    expect(text(allowed)).to.equal('pong')
    const rejected = await client.callTool({ name: 'pong', arguments: {} })
    expect(rejected.isError).to.equal(true)
    expect(asked).to.have.length(1)
    expect(asked[0]).to.match(/^Allow the call to "ping"\?/)
    expect(decided).to.deep.equal(['ping: allowed by mcp-serve', 'pong: rejected by approval-rules'])
    await serving.close()
  })

  it('without an approval service, asks each client about its own calls', async () => {
    const ctx = await deployment({ mode: 'native' })
    ctx.tools.register(ping)
    ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'every call asks' }))
    const asked: string[] = []
    const answering = (name: string, answer: ElicitResult) => () => {
      asked.push(name)
      return answer
    }
    const a = await linked(ctx, undefined, answering('a', { action: 'accept', content: { approve: true } }))
    const b = await linked(ctx, undefined, answering('b', { action: 'decline' }))
    expect(text(await a.client.callTool({ name: 'ping', arguments: {} }))).to.equal('pong')
    expect(text(await b.client.callTool({ name: 'ping', arguments: {} }))).to.match(/was rejected by the approver/)
    expect(asked).to.deep.equal(['a', 'b'])
    const direct = await call(ctx, 'ping', {})
    expect(direct.isError && direct.error.code).to.equal('DENIED')
    expect(asked).to.have.length(2)
  })

  it("a person's answer by elicitation does not count against the wall-clock budget of the program that made the call", async () => {
    const ctx = await deployment({ mode: 'code', codeLimits: { wallMs: 400 } }, (ctx) => ctx.plugin(WorkerSandbox, { poolSize: 1 }))
    ctx.tools.register(ping)
    ctx.on('tools/pre-execute', (exec) => (exec.name === 'ping' ? { kind: 'ask', reason: 'ping asks' } : undefined))
    // the client's person takes longer than the program's whole budget
    const slow = (async () => {
      await new Promise((resolve) => setTimeout(resolve, 700))
      return { action: 'accept', content: { approve: true } }
    }) as unknown as Elicit
    const { client, serving } = await linked(ctx, undefined, slow)
    const result = await client.callTool({ name: 'run_code', arguments: { code: 'return await tools.ping({})', description: 'pings' } })
    expect(result.structuredContent).to.deep.equal({ logs: [], result: 'pong' })
    await serving.close()
  })

  it('refuses an unknown agent by name', async () => {
    const ctx = await deployment({ mode: 'native' })
    const error = await serveMcp(ctx, { agent: 'nobody', transport: InMemoryTransport.createLinkedPair()[1] }).catch((e: Error) => e)
    expect((error as Error).message).to.equal('serveMcp: no agent named "nobody"; agents: none')
  })
})
