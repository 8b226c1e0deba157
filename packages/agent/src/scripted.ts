// ScriptedModel: a deterministic script of model turns, the embedded default that needs no network.

import type { ToolSchema } from '@faber/core'
import { type Message, type Model, ModelError, type ModelRequest, type ModelResponse, type Usage } from './model.ts'

export interface ScriptedCall {
  name: string
  /** an object is sent as its JSON; a string is sent as is, so a script can play malformed JSON */
  arguments?: unknown
  id?: string
}

export interface ScriptedTurn {
  text?: string
  toolCalls?: ScriptedCall[]
  usage?: Usage
}

/** what a script function sees: the conversation so far */
export interface ScriptView {
  /** the 0-based index of this model call in the script */
  step: number
  messages: readonly Message[]
  tools: readonly ToolSchema[]
  /** the tool results since the model's last turn, in call order */
  results: Extract<Message, { role: 'tool' }>[]
  /** the text of the last user message */
  user: string
}

export type ScriptStep = ScriptedTurn | ((view: ScriptView) => ScriptedTurn)

export interface ScriptedModelOptions {
  /** a pause before each answer, for demos that show a spinner; honours the abort signal */
  latencyMs?: number
}

function estimate(text: string) {
  return Math.ceil(text.length / 4)
}

function sleep(ms: number, signal: AbortSignal) {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason)
    const timer = setTimeout(done, ms)
    function done() {
      signal.removeEventListener('abort', abort)
      resolve()
    }
    function abort() {
      clearTimeout(timer)
      reject(signal.reason)
    }
    signal.addEventListener('abort', abort, { once: true })
  })
}

export class ScriptedModel implements Model {
  readonly name = 'scripted'
  private position = 0
  private ids = 0

  constructor(
    private script: readonly ScriptStep[],
    private options: ScriptedModelOptions = {},
  ) {}

  /** how many turns of the script have been played */
  get played() {
    return this.position
  }

  get remaining() {
    return this.script.length - this.position
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    const { messages, tools, signal } = request
    if (signal.aborted) throw signal.reason
    if (this.options.latencyMs) await sleep(this.options.latencyMs, signal)
    const step = this.position
    if (step >= this.script.length) {
      throw new ModelError(`the scripted model has no turn ${step + 1}: its script holds ${this.script.length} turn(s)`)
    }
    const entry = this.script[step]
    this.position++
    let turn: ScriptedTurn
    if (typeof entry === 'function') {
      let lastAssistant = messages.length - 1
      while (lastAssistant >= 0 && messages[lastAssistant].role !== 'assistant') lastAssistant--
      const results = messages.slice(lastAssistant + 1).filter((m): m is Extract<Message, { role: 'tool' }> => m.role === 'tool')
      const user = [...messages].reverse().find((m) => m.role === 'user')?.content ?? ''
      turn = entry({ step, messages, tools, results, user })
    } else {
      turn = entry
    }
    const text = turn.text ?? ''
    const toolCalls = (turn.toolCalls ?? []).map((call) => ({
      id: call.id ?? `call_${++this.ids}`,
      name: call.name,
      arguments: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments ?? {}),
    }))
    if (text && request.onText) for (const piece of text.match(/\S+\s*|\s+/g) ?? []) request.onText(piece)
    for (const [index, call] of toolCalls.entries()) request.onToolCall?.({ index, id: call.id, name: call.name })
    const promptTokens = estimate(messages.map((m) => m.content).join('\n') + JSON.stringify(tools))
    const completionTokens = estimate(text + toolCalls.map((c) => c.name + c.arguments).join(''))
    const usage = turn.usage ?? { promptTokens, completionTokens, totalTokens: promptTokens + completionTokens }
    return { text, toolCalls, usage, finishReason: toolCalls.length ? 'tool_calls' : 'stop' }
  }
}
