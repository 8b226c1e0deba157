// the one interface every model adapter implements, and the conversation it reads.

import type { ToolSchema } from '@faber/core'

/** one tool call as the model emitted it; `arguments` is the raw JSON text, parsed only by the loop */
export interface ToolCall {
  id: string
  name: string
  arguments: string
}

export type Message =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string; toolCalls?: ToolCall[] }
  | { role: 'tool'; toolCallId: string; name: string; content: string; isError?: boolean }

export interface Usage {
  promptTokens: number
  completionTokens: number
  totalTokens: number
}

export interface ModelRequest {
  /** the system prompt first, then the conversation */
  messages: readonly Message[]
  /** what the model is shown: `ctx.tools.wire(agent).tools` */
  tools: readonly ToolSchema[]
  signal: AbortSignal
  /** streaming callbacks: text as it arrives, and each tool call's name once it is known */
  onText?(delta: string): void
  onToolCall?(call: { index: number; id: string; name: string }): void
  /** a failed attempt is about to be retried after `delayMs` */
  onRetry?(retry: RetryInfo): void
}

export interface RetryInfo {
  /** the attempt about to start (2 for the first retry) and how many there may be in all */
  attempt: number
  maxAttempts: number
  delayMs: number
  /** short, for people: `429`, `network error (ECONNRESET)`, `the stream broke before any content` */
  reason: string
  status?: number
  /** the failed attempt's full message */
  message: string
}

export interface ModelResponse {
  text: string
  toolCalls: ToolCall[]
  usage?: Usage
  /** as the provider reported it, e.g. `stop`, `tool_calls`, `length` */
  finishReason?: string
}

export interface Model {
  /** for logs and transcripts, e.g. `scripted` or `openai:gpt-4o-mini` */
  readonly name: string
  complete(request: ModelRequest): Promise<ModelResponse>
}

/** a model call that failed for a reason a person should read; `status` is the HTTP status when there was one */
export class ModelError extends Error {
  /** the text streamed before the answer broke off, when some was (it was shown, and is not the whole answer) */
  partial?: string

  constructor(
    message: string,
    readonly status?: number,
    readonly retryable = false,
  ) {
    super(message)
    this.name = 'ModelError'
  }
}

export function addUsage(a: Usage | undefined, b: Usage | undefined): Usage | undefined {
  if (!a) return b && { ...b }
  if (!b) return a
  return {
    promptTokens: a.promptTokens + b.promptTokens,
    completionTokens: a.completionTokens + b.completionTokens,
    totalTokens: a.totalTokens + b.totalTokens,
  }
}
