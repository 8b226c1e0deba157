// sampling for imported servers: a server's `sampling/createMessage` goes to the model the deployment names for it
// (`sampling` in the client's config, built with @faber/agent's adapters), without tools, and is audited as
// `mcp/sampled`. Without that option the client does not offer sampling and refuses a server that asks anyway.

import { AnthropicModel, type Message, type Model, OpenAIChatModel } from '@faber/agent'
import type { CreateMessageRequest, CreateMessageResult } from '@modelcontextprotocol/sdk/types.js'
import { renderContent } from './content.ts'

/** the model sampling requests go to, as a deployer writes it (the fields of a deployment's `model`) */
export interface McpSampling {
  provider: 'openai' | 'anthropic'
  /** default https://api.openai.com/v1, or Anthropic's */
  baseURL?: string
  model: string
  /** the environment variable holding the API key */
  apiKeyEnv?: string
  /** a cap on the tokens one request may ask for (a server's own maxTokens is honoured below it) */
  maxTokens: number
  timeoutMs?: number
  maxRetries?: number
}

/** the audit record of one sampling request (the messages' text is not in it: a server may send anything) */
export interface McpSampled {
  server: string
  /** the tools of this server in flight when it asked */
  during: string[]
  /** the model that answered, `none` when refused */
  model: string
  outcome: 'answered' | 'failed' | 'refused'
  messages: number
  maxTokens: number
  stopReason?: string
  usage?: { promptTokens: number; completionTokens: number; totalTokens: number }
  error?: string
  durationMs: number
}

declare module 'cordis' {
  interface Events {
    /** an imported server asked to sample a model (`sampling/createMessage`), answered, failed or refused */
    'mcp/sampled'(event: McpSampled): void
  }
}

type Params = CreateMessageRequest['params']

/** a sampling message's content (one part, or several) as text; images and audio as placeholders */
function text(content: unknown): string {
  return renderContent(Array.isArray(content) ? content : [content])
}

/** the request as the adapters' conversation: the server's system prompt, then its messages */
export function samplingMessages(params: Params): Message[] {
  const messages: Message[] = []
  if (params.systemPrompt) messages.push({ role: 'system', content: params.systemPrompt })
  for (const message of params.messages) messages.push({ role: message.role, content: text(message.content) })
  return messages
}

/** one adapter per request: the server's maxTokens (under the cap) and temperature are the adapters' construction options */
export function samplingModel(config: McpSampling, params: Params): Model {
  const apiKey = config.apiKeyEnv ? process.env[config.apiKeyEnv] : undefined
  if (config.apiKeyEnv && !apiKey) throw new Error(`sampling.apiKeyEnv: the environment variable ${config.apiKeyEnv} is not set`)
  const options = {
    model: config.model,
    maxTokens: Math.min(params.maxTokens, config.maxTokens),
    ...(apiKey ? { apiKey } : {}),
    ...(params.temperature !== undefined ? { temperature: params.temperature } : {}),
    ...(config.timeoutMs !== undefined ? { timeoutMs: config.timeoutMs } : {}),
    ...(config.maxRetries !== undefined ? { maxRetries: config.maxRetries } : {}),
  }
  if (config.provider === 'anthropic') return new AnthropicModel({ ...options, ...(config.baseURL ? { baseURL: config.baseURL } : {}) })
  return new OpenAIChatModel({ ...options, baseURL: config.baseURL ?? 'https://api.openai.com/v1' })
}

const STOP_REASONS: Record<string, string> = {
  stop: 'endTurn',
  end_turn: 'endTurn',
  length: 'maxTokens',
  max_tokens: 'maxTokens',
  stop_sequence: 'stopSequence',
}

/** asks the model; resolves with the MCP result and what the audit records */
export async function sample(config: McpSampling, params: Params, signal: AbortSignal) {
  const model = samplingModel(config, params)
  const response = await model.complete({ messages: samplingMessages(params), tools: [], signal })
  const stopReason = response.finishReason ? (STOP_REASONS[response.finishReason] ?? response.finishReason) : undefined
  const result: CreateMessageResult = {
    role: 'assistant',
    content: { type: 'text', text: response.text },
    model: model.name,
    ...(stopReason ? { stopReason } : {}),
  }
  return { result, model: model.name, stopReason, usage: response.usage }
}
