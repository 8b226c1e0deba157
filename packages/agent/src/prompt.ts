// prompt assembly: ordered sections from every contributor. the registry contributes the code-only rule (50) and
// the SDK (200); the session the persona (0) and runtime context (300); plugins add per-tool guidance (100-199)
// by listening on `prompt/sections`.

import { type Agent, dispatch, listenersFor, type Mode, messageOf, type PromptSection, type ToolSchema } from '@faber/core'
import type { Context } from 'cordis'

export interface PromptInfo {
  agent?: Agent
  mode: Mode
  /** every tool the agent can see (presentation-agnostic), for guidance that applies only when a tool exists */
  visible: readonly ToolSchema[]
}

declare module 'cordis' {
  interface Events {
    /** contribute prompt sections for an agent; per-tool guidance belongs in orders 100-199 */
    'prompt/sections'(info: PromptInfo): PromptSection | PromptSection[] | undefined | void
  }
}

export const PERSONA_ORDER = 0
export const RUNTIME_ORDER = 300

export interface PromptOptions {
  persona?: string
  /** runtime context: workspace, date, anything the deployment wants the model to know; order 300 */
  context?: string
  /** extra sections the caller adds directly */
  sections?: PromptSection[]
}

export interface Prompt {
  sections: PromptSection[]
  text: string
}

function isSection(value: unknown): value is PromptSection {
  const s = value as PromptSection
  return typeof s === 'object' && s !== null && typeof s.id === 'string' && typeof s.order === 'number' && typeof s.text === 'string'
}

export function assemblePrompt(ctx: Context, agent: Agent | undefined, options: PromptOptions = {}): Prompt {
  const wire = ctx.tools.wire(agent)
  const sections: PromptSection[] = []
  if (options.persona) sections.push({ id: 'persona', order: PERSONA_ORDER, text: options.persona })
  sections.push(...wire.sections)
  const info: PromptInfo = { agent, mode: wire.mode, visible: ctx.tools.schemas(agent) }
  for (const answer of dispatch(listenersFor(ctx, 'prompt/sections', agent), [info])) {
    if (answer.failed) {
      ctx.root.logger('agent').warn('a prompt/sections listener of plugin "%s" threw (its sections were left out): %s', answer.plugin, messageOf(answer.error))
      continue
    }
    const contributed = answer.value
    for (const section of Array.isArray(contributed) ? contributed : contributed ? [contributed] : []) {
      if (isSection(section)) sections.push(section)
      else
        ctx.root.logger('agent').warn('a prompt/sections listener of plugin "%s" returned something that is not { id, order, text } (left out)', answer.plugin)
    }
  }
  if (options.sections) sections.push(...options.sections)
  if (options.context) sections.push({ id: 'runtime', order: RUNTIME_ORDER, text: options.context })
  const ordered = sections.filter((s) => s.text.trim()).sort((a, b) => a.order - b.order || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
  return { sections: ordered, text: ordered.map((s) => s.text.trim()).join('\n\n') }
}
