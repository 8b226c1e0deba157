import { call, deployment, disposeAll } from '@faber/core/testing'
import { expect } from 'chai'
import { type ModelServer, modelServer } from '../../../packages/agent/tests/model-servers.ts'
import * as mcp from '../src/index.ts'
import { fixtureServer } from './helpers.ts'

/** the asking server (its `sample` tool asks the client for `hi` in at most 10 tokens) imported with `sampling` set */
async function sampling(config: mcp.ConfigInput['sampling']) {
  const audit: mcp.McpSampled[] = []
  const ctx = await deployment({ mode: 'native' }, (ctx) => {
    ctx.on('mcp/sampled', (event) => void audit.push(event))
    ctx.plugin(mcp, { servers: [fixtureServer('asking', 'asking-server.ts')], sampling: config })
  })
  const result = await call(ctx, 'asking__sample', {})
  return { result, audit }
}

describe('mcp client: sampling with a configured model', function () {
  this.timeout(30000)
  let server: ModelServer | undefined
  afterEach(async () => {
    await disposeAll()
    await server?.close()
    server = undefined
  })

  it("sends a server's sampling/createMessage to the deployment's model, without tools, and audits it", async () => {
    server = await modelServer('openai', [{ text: 'Hello from the model.' }])
    const { result, audit } = await sampling({ baseURL: server.url, model: 'sampler', maxTokens: 500 })
    expect(result.content).to.equal('sampled: {"type":"text","text":"Hello from the model."}')
    expect(server.requests).to.have.length(1)
    const body = server.requests[0].body
    expect(body).to.deep.include({ model: 'sampler', max_tokens: 10 })
    expect(body.messages).to.deep.equal([{ role: 'user', content: 'hi' }])
    expect(body.tools).to.equal(undefined)
    expect(audit).to.have.length(1)
    expect(audit[0]).to.deep.include({
      server: 'asking',
      during: ['asking__sample'],
      model: 'openai:sampler',
      outcome: 'answered',
      messages: 1,
      maxTokens: 10,
      stopReason: 'endTurn',
    })
  })

  it('caps what a server may ask for, and reports a model that fails as a failed sampling', async () => {
    server = await modelServer('anthropic', [{ raw: (res) => res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"bad"}}') }])
    const { result, audit } = await sampling({ provider: 'anthropic', baseURL: server.url, model: 'claude-x', maxTokens: 4, maxRetries: 0 })
    expect(server.requests[0].body.max_tokens).to.equal(4)
    expect(result.content).to.match(/^refused: MCP error -32603: sampling failed: /)
    expect(audit[0]).to.deep.include({ outcome: 'failed', model: 'claude-x', maxTokens: 4 })
  })

  it('without a model, refuses with the reason and audits the refusal', async () => {
    const { result, audit } = await sampling(undefined)
    expect(result.content).to.equal('refused: MCP error -32600: sampling is not available: this Faber deployment configures no model for its MCP servers')
    expect(audit).to.have.length(1)
    expect(audit[0]).to.deep.include({ server: 'asking', model: 'none', outcome: 'refused', during: ['asking__sample'], messages: 1, maxTokens: 10 })
  })
})
