import { AnthropicModel, type AnthropicModelOptions, type Message, ModelError, toAnthropic } from '@faber/agent'
import { expect } from 'chai'
import { failure, type ModelServer, modelServer, type Step } from './model-servers.ts'

const signal = () => new AbortController().signal
const user: Message[] = [{ role: 'user', content: 'hi' }]

describe('AnthropicModel', () => {
  let server: ModelServer | undefined
  afterEach(async () => {
    await server?.close()
    server = undefined
  })

  async function model(steps: Step[], options: Partial<AnthropicModelOptions> = {}) {
    server = await modelServer('anthropic', steps)
    return new AnthropicModel({ baseURL: server.url, model: 'claude-test', apiKey: 'sk-ant-test', retryBaseMs: 1, ...options })
  }

  it('streams text and assembles tool_use input from input_json_delta fragments', async () => {
    const m = await model([
      {
        text: 'Let me look.',
        toolCalls: [
          { name: 'read', arguments: { path: 'a.txt' } },
          { name: 'list', arguments: {} },
        ],
      },
    ])
    const texts: string[] = []
    const announced: string[] = []
    const history: Message[] = [
      { role: 'system', content: 'be careful' },
      { role: 'user', content: 'hi' },
      {
        role: 'assistant',
        content: 'checking',
        toolCalls: [
          { id: 't0', name: 'list', arguments: '{}' },
          { id: 't1', name: 'read', arguments: '{"path":1' },
        ],
      },
      { role: 'tool', toolCallId: 't0', name: 'list', content: 'a.txt' },
      { role: 'tool', toolCallId: 't1', name: 'read', content: 'Error: bad arguments', isError: true },
      { role: 'user', content: 'go on' },
    ]
    const response = await m.complete({
      messages: history,
      tools: [{ name: 'read', description: 'read a file', parameters: { type: 'object', properties: { path: { type: 'string' } } } }],
      signal: signal(),
      onText: (d) => texts.push(d),
      onToolCall: (c) => announced.push(`${c.index}:${c.id}:${c.name}`),
    })
    expect(response.text).to.equal('Let me look.')
    expect(texts.join('')).to.equal('Let me look.')
    expect(response.toolCalls).to.deep.equal([
      { id: 'toolu_1_0', name: 'read', arguments: '{"path":"a.txt"}' },
      { id: 'toolu_1_1', name: 'list', arguments: '{}' },
    ])
    expect(announced).to.deep.equal(['0:toolu_1_0:read', '1:toolu_1_1:list'])
    expect(response.usage).to.deep.equal({ promptTokens: 10, completionTokens: 5, totalTokens: 15 })
    expect(response.finishReason).to.equal('tool_use')

    const [request] = server!.requests
    expect(request.path).to.equal('/v1/messages')
    expect(request.headers['x-api-key']).to.equal('sk-ant-test')
    expect(request.headers['anthropic-version']).to.equal('2023-06-01')
    expect(request.body).to.deep.include({ model: 'claude-test', max_tokens: 8192, stream: true, system: 'be careful' })
    expect(request.body.tools).to.deep.equal([
      { name: 'read', description: 'read a file', input_schema: { type: 'object', properties: { path: { type: 'string' } } } },
    ])
    expect(request.body.messages).to.deep.equal([
      { role: 'user', content: [{ type: 'text', text: 'hi' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'checking' },
          { type: 'tool_use', id: 't0', name: 'list', input: {} },
          { type: 'tool_use', id: 't1', name: 'read', input: { _arguments: '{"path":1' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 't0', content: 'a.txt' },
          { type: 'tool_result', tool_use_id: 't1', content: 'Error: bad arguments', is_error: true },
          { type: 'text', text: 'go on' },
        ],
      },
    ])
  })

  it('reads a non-streamed answer', async () => {
    const m = await model(
      [
        {
          raw: (res) => {
            res.writeHead(200, { 'content-type': 'application/json' })
            res.end(
              JSON.stringify({
                type: 'message',
                content: [
                  { type: 'text', text: 'sure' },
                  { type: 'tool_use', id: 'tu1', name: 'read', input: { path: 'b' } },
                ],
                stop_reason: 'tool_use',
                usage: { input_tokens: 3, output_tokens: 2 },
              }),
            )
          },
        },
      ],
      { stream: false },
    )
    const response = await m.complete({ messages: user, tools: [], signal: signal() })
    expect(response).to.deep.equal({
      text: 'sure',
      toolCalls: [{ id: 'tu1', name: 'read', arguments: '{"path":"b"}' }],
      usage: { promptTokens: 3, completionTokens: 2, totalTokens: 5 },
      finishReason: 'tool_use',
    })
    expect(server!.requests[0].body).not.to.have.property('stream')
  })

  it('retries 529 and 429, honouring retry-after, and reports each retry', async () => {
    const status = (code: number, retryAfter?: string): Step => ({
      raw: (res) => {
        res.writeHead(code, { 'content-type': 'application/json', ...(retryAfter ? { 'retry-after': retryAfter } : {}) })
        res.end(JSON.stringify({ type: 'error', error: { type: code === 529 ? 'overloaded_error' : 'rate_limit_error', message: 'busy' } }))
      },
    })
    const delays: number[] = []
    const m = await model([status(529), status(429, '3'), { text: 'done' }], { retryBaseMs: 10, sleep: async (ms) => void delays.push(ms) })
    const retries: string[] = []
    const response = await m.complete({
      messages: user,
      tools: [],
      signal: signal(),
      onRetry: (r) => retries.push(`${r.reason} in ${r.delayMs} (${r.attempt}/${r.maxAttempts})`),
    })
    expect(response.text).to.equal('done')
    expect(delays).to.deep.equal([10, 3000])
    expect(retries).to.deep.equal(['529 in 10 (2/4)', '429 in 3000 (3/4)'])
  })

  it('retries an overloaded error that arrives before any content; keeps text that came before a broken stream as partial', async () => {
    const overloaded: Step = {
      raw: (res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.end(`event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })}\n\n`)
      },
    }
    const m = await model([overloaded, { text: 'after the retry' }], { sleep: async () => {} })
    const retries: string[] = []
    const answer = await m.complete({ messages: user, tools: [], signal: signal(), onRetry: (r) => retries.push(r.reason) })
    expect(answer.text).to.equal('after the retry')
    // the retry says the provider is overloaded, not only that the stream broke
    expect(retries).to.deep.equal(['the provider is overloaded (overloaded_error)'])
    await server!.close()

    const spent = await model([overloaded, overloaded], { sleep: async () => {}, maxRetries: 1 })
    expect((await failure(spent, user)).message).to.equal('anthropic:claude-test: the provider is overloaded (overloaded_error mid-stream): Overloaded')
    await server!.close()

    const cut = await model([
      {
        raw: (res) => {
          res.writeHead(200, { 'content-type': 'text/event-stream' })
          const event = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`
          res.end(
            event('message_start', { message: { usage: { input_tokens: 1 } } }) +
              event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
              event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'half of it' } }),
          )
        },
      },
    ])
    const error = await failure(cut, user)
    expect(error).to.be.instanceOf(ModelError)
    expect(error.message).to.match(/ended before the model finished \(no message_stop\)/)
    expect(error.partial).to.equal('half of it')
    expect(server!.requests).to.have.length(1)
  })

  it('says to check the API key on a 401, without retrying', async () => {
    const m = await model([
      {
        raw: (res) => {
          res.writeHead(401, { 'content-type': 'application/json' })
          res.end(JSON.stringify({ type: 'error', error: { type: 'authentication_error', message: 'invalid x-api-key' } }))
        },
      },
    ])
    const error = await failure(m, user)
    expect(error.status).to.equal(401)
    expect(error.message).to.match(/invalid x-api-key.*Check the API key/)
    expect(server!.requests).to.have.length(1)
  })

  it('keeps roles alternating: consecutive messages of one role merge', () => {
    const { system, messages } = toAnthropic([
      { role: 'system', content: 'a' },
      { role: 'system', content: 'b' },
      { role: 'user', content: 'one' },
      { role: 'user', content: 'two' },
    ])
    expect(system).to.equal('a\n\nb')
    expect(messages).to.deep.equal([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'one' },
          { type: 'text', text: 'two' },
        ],
      },
    ])
  })
})
