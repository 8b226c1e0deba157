import type { ServerResponse } from 'node:http'
import { type Message, ModelError, OpenAIChatModel, type OpenAIChatModelOptions, parseRetryAfter } from '@faber/agent'
import { expect } from 'chai'
import { failure, httpServer, type ModelServer, type Received } from './model-servers.ts'

type Handler = (req: Received, res: ServerResponse) => void | Promise<void>

/** a real HTTP server answering each request with the next handler (the last one repeats) */
const serve = (...handlers: Handler[]) => httpServer((req, res, index) => handlers[Math.min(index, handlers.length - 1)](req, res))

function sse(res: ServerResponse, events: unknown[], options: { done?: boolean; crlf?: boolean } = {}) {
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  const nl = options.crlf ? '\r\n' : '\n'
  for (const event of events) res.write(`data: ${typeof event === 'string' ? event : JSON.stringify(event)}${nl}${nl}`)
  if (options.done !== false) res.write(`data: [DONE]${nl}${nl}`)
  res.end()
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  res.writeHead(status, { 'content-type': 'application/json', ...headers })
  res.end(JSON.stringify(body))
}

const delta = (d: unknown, finish: string | null = null) => ({
  id: 'x',
  object: 'chat.completion.chunk',
  choices: [{ index: 0, delta: d, finish_reason: finish }],
})

const signal = () => new AbortController().signal
const messages: Message[] = [{ role: 'user', content: 'hi' }]

describe('OpenAIChatModel', () => {
  let server: ModelServer | undefined
  afterEach(async () => {
    await server?.close()
    server = undefined
  })

  function model(options: Partial<OpenAIChatModelOptions> = {}) {
    return new OpenAIChatModel({ baseURL: server!.url, model: 'test-model', apiKey: 'sk-test', retryBaseMs: 1, ...options })
  }

  it('streams text and assembles tool calls from fragments across chunks', async () => {
    server = await serve((_, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      const events = [
        delta({ role: 'assistant', content: 'Let me ' }),
        delta({ content: 'look.' }),
        delta({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'read', arguments: '' } }] }),
        delta({ tool_calls: [{ index: 0, function: { arguments: '{"pa' } }] }),
        delta({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'list', arguments: '{}' } }] }),
        delta({ tool_calls: [{ index: 0, function: { arguments: 'th":"a.txt"}' } }] }),
        delta({}, 'tool_calls'),
        { id: 'x', choices: [], usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 } },
      ]
      // split the byte stream at arbitrary points, including inside a line, with CRLF line ends
      const text = `${events.map((e) => `data: ${JSON.stringify(e)}\r\n\r\n`).join('')}: keep-alive\n\ndata: [DONE]\n\n`
      for (let i = 0; i < text.length; i += 37) res.write(text.slice(i, i + 37))
      res.end()
    })
    const texts: string[] = []
    const announced: string[] = []
    const history: Message[] = [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'c0', name: 'list', arguments: '{}' }] },
      { role: 'tool', toolCallId: 'c0', name: 'list', content: 'a.txt' },
    ]
    const response = await model().complete({
      messages: history,
      tools: [{ name: 'read', description: 'read a file', parameters: { type: 'object', properties: { path: { type: 'string' } } } }],
      signal: signal(),
      onText: (d) => texts.push(d),
      onToolCall: (c) => announced.push(`${c.index}:${c.id}:${c.name}`),
    })
    expect(response.text).to.equal('Let me look.')
    expect(texts).to.deep.equal(['Let me ', 'look.'])
    expect(response.toolCalls).to.deep.equal([
      { id: 'call_a', name: 'read', arguments: '{"path":"a.txt"}' },
      { id: 'call_b', name: 'list', arguments: '{}' },
    ])
    expect(announced).to.deep.equal(['0:call_a:read', '1:call_b:list'])
    expect(response.usage).to.deep.equal({ promptTokens: 12, completionTokens: 7, totalTokens: 19 })
    expect(response.finishReason).to.equal('tool_calls')

    const [request] = server.requests
    expect(request.url).to.equal('/v1/chat/completions')
    expect(request.headers.authorization).to.equal('Bearer sk-test')
    expect(request.body).to.deep.include({ model: 'test-model', stream: true, stream_options: { include_usage: true } })
    expect(request.body.tools).to.deep.equal([
      { type: 'function', function: { name: 'read', description: 'read a file', parameters: { type: 'object', properties: { path: { type: 'string' } } } } },
    ])
    expect(request.body.messages).to.deep.equal([
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c0', type: 'function', function: { name: 'list', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c0', content: 'a.txt' },
    ])
  })

  it('reads a non-streamed answer', async () => {
    server = await serve((_, res) =>
      json(res, 200, {
        choices: [
          {
            message: { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'read', arguments: '{}' } }] },
            finish_reason: 'tool_calls',
          },
        ],
        usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
      }),
    )
    const response = await model({ stream: false }).complete({ messages, tools: [], signal: signal() })
    expect(response.toolCalls).to.deep.equal([{ id: 'c1', name: 'read', arguments: '{}' }])
    expect(response.usage?.totalTokens).to.equal(5)
    expect(server.requests[0].body.stream).to.equal(false)
    expect(server.requests[0].body).not.to.have.property('tools')
  })

  it('retries a 429, honouring Retry-After', async () => {
    server = await serve(
      (_, res) => json(res, 429, { error: { message: 'slow down' } }, { 'retry-after': '2' }),
      (_, res) => sse(res, [delta({ content: 'ok' }, 'stop')]),
    )
    const delays: number[] = []
    const response = await model({ sleep: async (ms) => void delays.push(ms) }).complete({ messages, tools: [], signal: signal() })
    expect(response.text).to.equal('ok')
    expect(delays).to.deep.equal([2000])
    expect(server.requests).to.have.length(2)
  })

  it('backs off on 5xx and gives up after maxRetries with a clear error', async () => {
    server = await serve((_, res) => json(res, 503, { error: { message: 'overloaded' } }))
    const delays: number[] = []
    const error = await failure(model({ maxRetries: 3, retryBaseMs: 10, sleep: async (ms) => void delays.push(ms) }), messages)
    expect(error).to.be.instanceOf(ModelError)
    expect(error.status).to.equal(503)
    expect(error.message).to.include('overloaded')
    expect(delays).to.deep.equal([10, 20, 40])
    expect(server.requests).to.have.length(4)
  })

  it('does not retry a 401 and says to check the API key', async () => {
    server = await serve((_, res) => json(res, 401, { error: { message: 'Incorrect API key provided' } }))
    const error = await failure(model(), messages)
    expect(error.status).to.equal(401)
    expect(error.message).to.match(/Incorrect API key provided.*Check the API key/)
    expect(server.requests).to.have.length(1)
  })

  it('names the base URL and the model on a 404', async () => {
    server = await serve((_, res) => json(res, 404, { error: { message: 'model not found' } }))
    const error = await failure(model(), messages)
    expect(error.status).to.equal(404)
    expect(error.message).to.include('/v1/chat/completions').and.include('"test-model"').and.include('model not found')
  })

  it('rejects bad payloads with a clear error', async () => {
    server = await serve(
      (_, res) => sse(res, ['{"choices": [ broken']),
      (_, res) => json(res, 200, { object: 'chat.completion' }),
      (_, res) => sse(res, [delta({ content: 'cut' })], { done: false }),
      (_, res) => sse(res, [{ error: { message: 'context length exceeded' } }]),
    )
    const errors: string[] = []
    for (const stream of [true, false, true, true]) {
      await model({ stream, maxRetries: 0 })
        .complete({ messages, tools: [], signal: signal() })
        .then(
          () => errors.push('resolved'),
          (e) => errors.push(e instanceof ModelError ? e.message : `not a ModelError: ${e}`),
        )
    }
    expect(errors[0]).to.match(/stream chunk is not JSON/)
    expect(errors[1]).to.match(/no choices\[0\]\.message/)
    expect(errors[2]).to.match(/ended before the model finished/)
    expect(errors[3]).to.match(/context length exceeded/)
  })

  it('retries a stream that breaks before any content, and reports each retry first', async () => {
    server = await serve(
      (_, res) => sse(res, ['{"choices": [ broken']),
      (_, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write(': connected\n\n', () => res.destroy())
      },
      (_, res) => sse(res, [delta({ content: 'fine' }, 'stop')]),
    )
    const retries: string[] = []
    const response = await model({ sleep: async () => {} }).complete({
      messages,
      tools: [],
      signal: signal(),
      onRetry: (r) => retries.push(`${r.reason} ${r.attempt}/${r.maxAttempts}`),
    })
    expect(response.text).to.equal('fine')
    expect(retries).to.deep.equal(['the stream broke before any content 2/4', 'the stream broke before any content 3/4'])
  })

  it('keeps the text of a stream that breaks after content as partial, and does not retry it', async () => {
    server = await serve((_, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(`data: ${JSON.stringify(delta({ content: 'half an ans' }))}\n\n`)
      res.end('data: {"choices": [ broken\n\n')
    })
    const error = await failure(model({ sleep: async () => {} }), messages)
    expect(error).to.be.instanceOf(ModelError)
    expect(error.message).to.match(/stream chunk is not JSON/)
    expect(error.partial).to.equal('half an ans')
    expect(server.requests).to.have.length(1)
  })

  it('reports a 429 retry with its status and the Retry-After delay', async () => {
    server = await serve(
      (_, res) => json(res, 429, { error: { message: 'slow down' } }, { 'retry-after': '2' }),
      (_, res) => sse(res, [delta({ content: 'ok' }, 'stop')]),
    )
    const retries: unknown[] = []
    await model({ sleep: async () => {} }).complete({ messages, tools: [], signal: signal(), onRetry: (r) => retries.push(r) })
    expect(retries).to.deep.equal([
      {
        attempt: 2,
        maxAttempts: 4,
        delayMs: 2000,
        reason: '429',
        status: 429,
        message: `openai:test-model: the server answered 429 at ${server.url}/chat/completions: slow down`,
      },
    ])
  })

  it('an option given as undefined keeps its default (a deployment file that leaves it out)', async () => {
    server = await serve((_, res) => sse(res, [delta({ content: 'streamed' }, 'stop')]))
    const unset: { timeoutMs?: number; maxRetries?: number; stream?: boolean } = {}
    const options: OpenAIChatModelOptions = { baseURL: server.url, model: 'm', ...unset }
    Object.assign(options, { timeoutMs: undefined, maxRetries: undefined, stream: undefined })
    const response = await new OpenAIChatModel(options).complete({ messages, tools: [], signal: signal() })
    expect(response.text).to.equal('streamed')
    expect(server.requests[0].body.stream).to.equal(true)
  })

  it('times out a server that stops sending, and retries a silent one', async () => {
    server = await serve((_, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(`data: ${JSON.stringify(delta({ content: 'partial' }))}\n\n`)
    })
    const error = await failure(model({ timeoutMs: 100, maxRetries: 0 }), messages)
    expect(error?.message).to.match(/for 100 ms \(timeout\)/)
    await server.close()

    server = await serve(() => {})
    const silent = await failure(model({ timeoutMs: 100, maxRetries: 1, sleep: async () => {} }), messages)
    expect(silent?.message).to.match(/timeout/)
    expect(server.requests).to.have.length(2)
  })

  it('stops at once when the caller aborts mid-stream', async () => {
    server = await serve((_, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(`data: ${JSON.stringify(delta({ content: 'hello' }))}\n\n`)
    })
    const controller = new AbortController()
    const reason = new Error('user cancelled')
    const promise = model().complete({ messages, tools: [], signal: controller.signal, onText: () => controller.abort(reason) })
    let error: unknown
    await promise.catch((e) => (error = e))
    expect(error).to.equal(reason)
  })

  it('reports a connection that cannot be made as a network error, after retrying', async () => {
    server = await serve(() => {})
    const url = server.url
    await server.close()
    server = undefined
    let sleeps = 0
    const error = await failure(new OpenAIChatModel({ baseURL: url, model: 'm', maxRetries: 2, sleep: async () => void sleeps++ }), messages)
    expect(error?.message).to.match(/network error connecting to .*ECONNREFUSED/)
    expect(sleeps).to.equal(2)
  })

  it('reports a fetch that threw a value that cannot be turned into text as a network error, with a message', async () => {
    // a deployer's fetch may throw anything: this value has no prototype, so String() of it throws in turn
    const fetch = async () => {
      throw Object.create(null)
    }
    const error = await failure(new OpenAIChatModel({ baseURL: 'http://127.0.0.1:9', model: 'm', maxRetries: 0, fetch }), messages)
    expect(error?.message).to.match(/network error connecting to \S+: an error that could not be shown$/)
  })

  it('parses Retry-After as seconds or an HTTP date', () => {
    expect(parseRetryAfter('3')).to.equal(3000)
    expect(parseRetryAfter(new Date(10_000).toUTCString(), 4_000)).to.equal(6000)
    expect(parseRetryAfter('soon')).to.equal(undefined)
  })
})
