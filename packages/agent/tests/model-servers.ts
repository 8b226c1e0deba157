// real HTTP servers on 127.0.0.1 (port 0) that speak a model provider's streaming API from a script of turns:
// OpenAI chat completions and Anthropic Messages. each request gets the next turn; the requests are kept for asserts.

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Message, Model } from '@faber/agent'

export interface Turn {
  text?: string
  toolCalls?: { name: string; arguments: unknown }[]
}

/** a turn, a function of the request body, or a raw handler (status codes, broken streams) */
export type Step = Turn | ((body: any) => Turn) | { raw: (res: ServerResponse, body: any) => void }

/** a request as the server received it: its JSON body parsed, `path` its URL */
export type Received = IncomingMessage & { body: any; path: string }

export interface ModelServer {
  /** the base URL: `http://127.0.0.1:PORT/v1` */
  url: string
  requests: Received[]
  close(): Promise<void>
}

/** a real HTTP server on 127.0.0.1 (port 0): each request is read, recorded, and handed to `handle` with its index */
export async function httpServer(handle: (req: Received, res: ServerResponse, index: number) => void | Promise<void>): Promise<ModelServer> {
  const requests: Received[] = []
  const server = createServer(async (req, res) => {
    let text = ''
    for await (const chunk of req) text += chunk
    const received = Object.assign(req, { body: text ? JSON.parse(text) : undefined, path: req.url ?? '' })
    requests.push(received)
    await handle(received, res, requests.length - 1)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

function chunks(text: string, size = 7) {
  const out: string[] = []
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size))
  return out
}

function openai(res: ServerResponse, turn: Turn, step: number) {
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  const send = (delta: unknown, finish: string | null = null) =>
    res.write(`data: ${JSON.stringify({ id: `c${step}`, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`)
  for (const part of chunks(turn.text ?? '')) send({ content: part })
  for (const [index, call] of (turn.toolCalls ?? []).entries()) {
    send({ tool_calls: [{ index, id: `call_${step}_${index}`, type: 'function', function: { name: call.name, arguments: '' } }] })
    for (const part of chunks(JSON.stringify(call.arguments), 16)) send({ tool_calls: [{ index, function: { arguments: part } }] })
  }
  send({}, turn.toolCalls?.length ? 'tool_calls' : 'stop')
  res.write(`data: ${JSON.stringify({ id: `c${step}`, choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } })}\n\n`)
  res.end('data: [DONE]\n\n')
}

function anthropic(res: ServerResponse, turn: Turn, step: number) {
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  const send = (type: string, data: Record<string, unknown>) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)
  send('message_start', { message: { id: `msg_${step}`, type: 'message', role: 'assistant', content: [], usage: { input_tokens: 10, output_tokens: 1 } } })
  let index = 0
  if (turn.text) {
    send('content_block_start', { index, content_block: { type: 'text', text: '' } })
    send('ping', {})
    for (const part of chunks(turn.text)) send('content_block_delta', { index, delta: { type: 'text_delta', text: part } })
    send('content_block_stop', { index })
    index++
  }
  for (const [n, call] of (turn.toolCalls ?? []).entries()) {
    send('content_block_start', { index, content_block: { type: 'tool_use', id: `toolu_${step}_${n}`, name: call.name, input: {} } })
    for (const part of chunks(JSON.stringify(call.arguments), 16))
      send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: part } })
    send('content_block_stop', { index })
    index++
  }
  send('message_delta', { delta: { stop_reason: turn.toolCalls?.length ? 'tool_use' : 'end_turn' }, usage: { output_tokens: 5 } })
  res.end(`event: message_stop\ndata: ${JSON.stringify({ type: 'message_stop' })}\n\n`)
}

/** a server that answers the n-th request with the n-th step, streamed the way `kind`'s API does */
export function modelServer(kind: 'openai' | 'anthropic', steps: Step[]): Promise<ModelServer> {
  return httpServer((req, res, index) => {
    const step = steps[index]
    if (!step) {
      res.writeHead(500, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { message: `the script has no step ${index + 1}` } }))
      return
    }
    if ('raw' in step) return step.raw(res, req.body)
    const turn = typeof step === 'function' ? step(req.body) : step
    if (kind === 'openai') openai(res, turn, index + 1)
    else anthropic(res, turn, index + 1)
  })
}

/** the error `model` fails to complete `messages` with, no tools offered (undefined: it did not fail) */
export function failure(model: Model, messages: Message[]): Promise<any> {
  return model.complete({ messages, tools: [], signal: new AbortController().signal }).then(
    () => undefined,
    (error) => error,
  )
}
