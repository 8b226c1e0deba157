// AnthropicModel: the Anthropic Messages API over fetch. tool calls are `tool_use` blocks and their results
// `tool_result` blocks in the next user message; streaming SSE assembles each tool's input from `input_json_delta`
// fragments; retries on 429, 529 and other 5xx honour retry-after. the transport (idle timeout, retry loop, SSE) is
// the one the OpenAI adapter uses, so a retry is reported the same way whichever provider is behind it.

import type { HttpModelOptions } from './http.ts'
import { type Attempt, BrokenStream, type Defined, type Endpoint, post, providerMessage, readEvents, streamFailure, withDefaults, withRetries } from './http.ts'
import type { Message, Model, ModelRequest, ModelResponse, ToolCall, Usage } from './model.ts'
import { ModelError } from './model.ts'

export interface AnthropicModelOptions extends HttpModelOptions {
  /** default `https://api.anthropic.com/v1`; requests go to `{baseURL}/messages` */
  baseURL?: string
  /** the answer's token budget, which the API requires (default 8192) */
  maxTokens?: number
  /** retries after a 429, a 529 or another 5xx, a network error or a timeout; default 3 */
  maxRetries?: number
  /** the `anthropic-version` header (default 2023-06-01) */
  version?: string
}

type Block =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown }
  | { type: 'tool_result'; tool_use_id: string; content: string; is_error?: boolean }

interface WireMessage {
  role: 'user' | 'assistant'
  content: Block[]
}

/** a tool_use input must be an object: arguments that are not a JSON object travel as the raw text */
function inputOf(args: string): unknown {
  try {
    const value = args.trim() ? JSON.parse(args) : {}
    if (value && typeof value === 'object' && !Array.isArray(value)) return value
  } catch {}
  return { _arguments: args }
}

/** the system text, and the conversation as alternating user / assistant messages of content blocks */
export function toAnthropic(messages: readonly Message[]): { system: string; messages: WireMessage[] } {
  const system: string[] = []
  const out: WireMessage[] = []
  const push = (role: WireMessage['role'], blocks: Block[]) => {
    if (!blocks.length) return
    const last = out.at(-1)
    // the API wants roles to alternate: consecutive messages of one role become one message
    if (last?.role === role) last.content.push(...blocks)
    else out.push({ role, content: blocks })
  }
  for (const message of messages) {
    switch (message.role) {
      case 'system':
        system.push(message.content)
        break
      case 'user':
        push('user', message.content ? [{ type: 'text', text: message.content }] : [])
        break
      case 'assistant': {
        const blocks: Block[] = message.content ? [{ type: 'text', text: message.content }] : []
        for (const call of message.toolCalls ?? []) blocks.push({ type: 'tool_use', id: call.id, name: call.name, input: inputOf(call.arguments) })
        push('assistant', blocks)
        break
      }
      case 'tool':
        push('user', [{ type: 'tool_result', tool_use_id: message.toolCallId, content: message.content, ...(message.isError ? { is_error: true } : {}) }])
        break
    }
  }
  return { system: system.join('\n\n'), messages: out }
}

function usageOf(input: unknown, output: unknown): Usage | undefined {
  if (input === undefined && output === undefined) return undefined
  const promptTokens = Number(input) || 0
  const completionTokens = Number(output) || 0
  return { promptTokens, completionTokens, totalTokens: promptTokens + completionTokens }
}

const DEFAULTS = {
  baseURL: 'https://api.anthropic.com/v1',
  timeoutMs: 60_000,
  maxRetries: 3,
  retryBaseMs: 500,
  retryMaxMs: 30_000,
  stream: true,
  maxTokens: 8192,
  version: '2023-06-01',
}

export class AnthropicModel<O extends AnthropicModelOptions = AnthropicModelOptions> implements Model {
  readonly name: string
  private options: typeof DEFAULTS & AnthropicModelOptions
  /** what the shared transport needs to post and read */
  private endpoint: Endpoint

  constructor(options: Defined<O, keyof typeof DEFAULTS>) {
    if (!options?.model) throw new TypeError('AnthropicModel: model is required, e.g. claude-sonnet-4-5')
    this.options = withDefaults(DEFAULTS, options as AnthropicModelOptions)
    this.name = `anthropic:${options.model}`
    this.endpoint = { name: this.name, url: this.url, options: this.options, readStream: this.readStream.bind(this), readJson: this.readJson.bind(this) }
  }

  get url() {
    return `${this.options.baseURL.replace(/\/+$/, '')}/messages`
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    const { options } = this
    const { system, messages } = toAnthropic(request.messages)
    const body: Record<string, unknown> = {
      model: options.model,
      max_tokens: options.maxTokens,
      ...(system ? { system } : {}),
      messages,
      ...(request.tools.length ? { tools: request.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters })) } : {}),
      ...(options.stream ? { stream: true } : {}),
      ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
      ...options.extraBody,
    }
    const payload = JSON.stringify(body)
    const headers: Record<string, string> = { 'anthropic-version': options.version, ...(options.apiKey ? { 'x-api-key': options.apiKey } : {}) }
    return withRetries(options, request, () => post(this.endpoint, payload, request, headers))
  }

  private readJson(body: any, text: string, request: ModelRequest): ModelResponse {
    if (body?.type === 'error' || body?.error) throw new ModelError(`${this.name}: the server reported an error: ${providerMessage(text)}`)
    if (!Array.isArray(body?.content)) throw new ModelError(`${this.name}: unexpected answer, no content blocks in ${text.slice(0, 200)}`)
    let answer = ''
    const toolCalls: ToolCall[] = []
    for (const block of body.content) {
      if (block?.type === 'text' && typeof block.text === 'string') answer += block.text
      else if (block?.type === 'tool_use') {
        if (typeof block.name !== 'string' || !block.name) throw new ModelError(`${this.name}: unexpected answer, a tool_use block has no name`)
        const call = {
          id: typeof block.id === 'string' && block.id ? block.id : `toolu_${toolCalls.length}`,
          name: block.name,
          arguments: JSON.stringify(block.input ?? {}),
        }
        request.onToolCall?.({ index: toolCalls.length, id: call.id, name: call.name })
        toolCalls.push(call)
      }
    }
    if (answer) request.onText?.(answer)
    return { text: answer, toolCalls, usage: usageOf(body.usage?.input_tokens, body.usage?.output_tokens), finishReason: body.stop_reason ?? undefined }
  }

  private async readStream(body: ReadableStream<Uint8Array>, request: ModelRequest, attempt: Attempt): Promise<ModelResponse> {
    // content blocks by their index; tool inputs arrive as partial JSON text
    const blocks: ({ type: 'text' } | { type: 'tool_use'; id: string; name: string; json: string; input: unknown })[] = []
    let text = ''
    let shown = false
    let inputTokens: unknown
    let outputTokens: unknown
    let finishReason: string | undefined
    let stopped = false

    const handle = (event: string, data: string) => {
      let payload: any
      try {
        payload = JSON.parse(data)
      } catch {
        throw new BrokenStream(`a stream event is not JSON: ${data.slice(0, 200)}`)
      }
      const type = payload?.type ?? event
      switch (type) {
        case 'message_start':
          inputTokens = payload.message?.usage?.input_tokens
          outputTokens = payload.message?.usage?.output_tokens
          return
        case 'content_block_start': {
          const block = payload.content_block
          if (block?.type === 'tool_use') {
            if (typeof block.name !== 'string' || !block.name) throw new ModelError(`${this.name}: the stream sent a tool_use block without a name`)
            const id = typeof block.id === 'string' && block.id ? block.id : `toolu_${payload.index}`
            blocks[payload.index] = { type: 'tool_use', id, name: block.name, json: '', input: block.input }
            shown = true
            request.onToolCall?.({ index: blocks.filter((b) => b?.type === 'tool_use').length - 1, id, name: block.name })
          } else {
            blocks[payload.index] = { type: 'text' }
            if (typeof block?.text === 'string' && block.text) {
              text += block.text
              shown = true
              request.onText?.(block.text)
            }
          }
          return
        }
        case 'content_block_delta': {
          const delta = payload.delta
          const block = blocks[payload.index]
          if (delta?.type === 'text_delta' && typeof delta.text === 'string' && delta.text) {
            text += delta.text
            shown = true
            request.onText?.(delta.text)
          } else if (delta?.type === 'input_json_delta' && block?.type === 'tool_use' && typeof delta.partial_json === 'string') {
            block.json += delta.partial_json
          }
          return
        }
        case 'message_delta':
          if (payload.delta?.stop_reason) finishReason = payload.delta.stop_reason
          if (payload.usage?.output_tokens !== undefined) outputTokens = payload.usage.output_tokens
          if (payload.usage?.input_tokens !== undefined) inputTokens = payload.usage.input_tokens
          return
        case 'message_stop':
          stopped = true
          return true
        case 'error': {
          const message = payload.error?.message ?? data
          // an overloaded server mid-stream is worth another attempt as long as nothing was shown
          if (payload.error?.type === 'overloaded_error')
            throw new BrokenStream(`the provider is overloaded (overloaded_error mid-stream): ${message}`, 'the provider is overloaded (overloaded_error)')
          throw new ModelError(`${this.name}: the server reported an error mid-stream: ${message}`)
        }
        default:
          return
      }
    }

    try {
      await readEvents(body, attempt, handle)
      if (!stopped) throw new BrokenStream('the stream ended before the model finished (no message_stop)')
    } catch (error) {
      throw streamFailure(this.endpoint, error, attempt, request, shown, text)
    }
    const toolCalls: ToolCall[] = []
    for (const block of blocks) {
      if (block?.type !== 'tool_use') continue
      // the input is the concatenated partial JSON; a block that streamed none keeps the input it started with
      toolCalls.push({ id: block.id, name: block.name, arguments: block.json || JSON.stringify(block.input ?? {}) })
    }
    return { text, toolCalls, usage: usageOf(inputTokens, outputTokens), finishReason }
  }
}
