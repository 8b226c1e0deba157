// OpenAIChatModel: OpenAI-compatible chat completions over fetch (OpenAI, DeepSeek, vLLM, Ollama, llama.cpp server).
// streaming SSE with tool-call deltas assembled across chunks, usage, retries with backoff on 429/5xx, an idle timeout.

import type { HttpModelOptions } from './http.ts'
import { type Attempt, BrokenStream, type Defined, type Endpoint, post, providerMessage, readEvents, streamFailure, withDefaults, withRetries } from './http.ts'
import type { Message, Model, ModelRequest, ModelResponse, ToolCall, Usage } from './model.ts'
import { ModelError } from './model.ts'

export interface OpenAIChatModelOptions extends HttpModelOptions {
  /** e.g. `https://api.openai.com/v1`, `https://api.deepseek.com`, `http://localhost:11434/v1` */
  baseURL: string
}

type WireMessage = Record<string, unknown>

interface Fragment {
  id: string
  name: string
  arguments: string
  announced: boolean
}

function toWire(message: Message): WireMessage {
  switch (message.role) {
    case 'assistant': {
      const calls = message.toolCalls ?? []
      if (!calls.length) return { role: 'assistant', content: message.content }
      return {
        role: 'assistant',
        content: message.content || null,
        tool_calls: calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
      }
    }
    case 'tool':
      return { role: 'tool', tool_call_id: message.toolCallId, content: message.content }
    default:
      return { role: message.role, content: message.content }
  }
}

function usageOf(raw: any): Usage | undefined {
  if (!raw || typeof raw !== 'object') return undefined
  const promptTokens = Number(raw.prompt_tokens) || 0
  const completionTokens = Number(raw.completion_tokens) || 0
  return { promptTokens, completionTokens, totalTokens: Number(raw.total_tokens) || promptTokens + completionTokens }
}

const DEFAULTS = { timeoutMs: 60_000, maxRetries: 3, retryBaseMs: 500, retryMaxMs: 30_000, stream: true }

export class OpenAIChatModel<O extends OpenAIChatModelOptions = OpenAIChatModelOptions> implements Model {
  readonly name: string
  private options: typeof DEFAULTS & OpenAIChatModelOptions
  /** what the shared transport needs to post and read */
  private endpoint: Endpoint

  constructor(options: Defined<O, keyof typeof DEFAULTS>) {
    if (!options?.baseURL) throw new TypeError('OpenAIChatModel: baseURL is required, e.g. https://api.openai.com/v1')
    if (!options.model) throw new TypeError('OpenAIChatModel: model is required, e.g. gpt-4o-mini')
    this.options = withDefaults(DEFAULTS, options as OpenAIChatModelOptions)
    this.name = `openai:${options.model}`
    this.endpoint = { name: this.name, url: this.url, options: this.options, readStream: this.readStream.bind(this), readJson: this.readJson.bind(this) }
  }

  get url() {
    return `${this.options.baseURL.replace(/\/+$/, '')}/chat/completions`
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    const { options } = this
    const body: Record<string, unknown> = {
      model: options.model,
      messages: request.messages.map(toWire),
      stream: options.stream,
      ...(options.stream ? { stream_options: { include_usage: true } } : {}),
      ...(request.tools.length
        ? { tools: request.tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters } })) }
        : {}),
      ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
      ...(options.maxTokens !== undefined ? { max_tokens: options.maxTokens } : {}),
      ...options.extraBody,
    }
    const payload = JSON.stringify(body)
    const headers: Record<string, string> = options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {}
    return withRetries(options, request, () => post(this.endpoint, payload, request, headers))
  }

  private readJson(body: any, text: string, request: ModelRequest): ModelResponse {
    if (body?.error) throw new ModelError(`${this.name}: the server reported an error: ${providerMessage(text)}`)
    const message = body?.choices?.[0]?.message
    if (!message || typeof message !== 'object') throw new ModelError(`${this.name}: unexpected answer, no choices[0].message in ${text.slice(0, 200)}`)
    const toolCalls: ToolCall[] = []
    for (const [index, raw] of (Array.isArray(message.tool_calls) ? message.tool_calls : []).entries()) {
      const name = raw?.function?.name
      if (typeof name !== 'string' || !name) throw new ModelError(`${this.name}: unexpected answer, tool call ${index} has no function name`)
      const args = raw.function.arguments
      const call = {
        id: typeof raw.id === 'string' && raw.id ? raw.id : `call_${index}`,
        name,
        arguments: typeof args === 'string' ? args : JSON.stringify(args ?? {}),
      }
      toolCalls.push(call)
      request.onToolCall?.({ index, id: call.id, name })
    }
    const text_ = typeof message.content === 'string' ? message.content : ''
    if (text_) request.onText?.(text_)
    return { text: text_, toolCalls, usage: usageOf(body.usage), finishReason: body.choices[0].finish_reason ?? undefined }
  }

  private async readStream(body: ReadableStream<Uint8Array>, request: ModelRequest, attempt: Attempt): Promise<ModelResponse> {
    const fragments: Fragment[] = []
    let text = ''
    let shown = false
    let usage: Usage | undefined
    let finishReason: string | undefined

    const handle = (json: string) => {
      if (json === '[DONE]') return true
      let chunk: any
      try {
        chunk = JSON.parse(json)
      } catch {
        throw new BrokenStream(`a stream chunk is not JSON: ${json.slice(0, 200)}`)
      }
      if (chunk?.error) throw new ModelError(`${this.name}: the server reported an error mid-stream: ${providerMessage(json)}`)
      if (chunk?.usage) usage = usageOf(chunk.usage)
      const choice = chunk?.choices?.[0]
      if (!choice) return
      const delta = choice.delta ?? {}
      if (typeof delta.content === 'string' && delta.content) {
        text += delta.content
        shown = true
        request.onText?.(delta.content)
      }
      if (Array.isArray(delta.tool_calls)) {
        for (const [position, raw] of delta.tool_calls.entries()) {
          const index = typeof raw?.index === 'number' ? raw.index : position
          const fragment = (fragments[index] ??= { id: '', name: '', arguments: '', announced: false })
          if (typeof raw?.id === 'string' && raw.id) fragment.id = raw.id
          const fn = raw?.function ?? {}
          // OpenAI sends the name once; some servers repeat it whole on every chunk
          if (typeof fn.name === 'string' && fn.name && fn.name !== fragment.name) fragment.name += fn.name
          if (typeof fn.arguments === 'string') fragment.arguments += fn.arguments
          else if (fn.arguments && typeof fn.arguments === 'object') fragment.arguments = JSON.stringify(fn.arguments)
          if (!fragment.announced && fragment.name) {
            fragment.announced = true
            shown = true
            fragment.id ||= `call_${index}`
            request.onToolCall?.({ index, id: fragment.id, name: fragment.name })
          }
        }
      }
      if (choice.finish_reason) finishReason = choice.finish_reason
    }

    try {
      const done = await readEvents(body, attempt, (_, data) => handle(data))
      if (!done && !finishReason) throw new BrokenStream('the stream ended before the model finished (no finish_reason and no [DONE])')
    } catch (error) {
      throw streamFailure(this.endpoint, error, attempt, request, shown, text)
    }
    const toolCalls: ToolCall[] = []
    fragments.forEach((fragment, index) => {
      if (!fragment) return
      if (!fragment.name) throw new ModelError(`${this.name}: the stream sent tool call ${index} without a function name`)
      toolCalls.push({ id: fragment.id || `call_${index}`, name: fragment.name, arguments: fragment.arguments })
    })
    return { text, toolCalls, usage, finishReason }
  }
}
