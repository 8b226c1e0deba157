// a third-party guard, written only against @faber/core's public API: it keeps credentials out of tool arguments
// (a tools/pre-execute denial, before anyone is asked to approve the call), masks them in results
// (tools/post-execute), and keeps destructive tools away from agents that should not have them (a synchronous guard).

import { defineConfig, type Execution, type Json } from '@faber/core'
import { type Context, Schema } from 'cordis'

const BUILT_IN: Record<string, string> = {
  'an AWS access key': 'AKIA[0-9A-Z]{16}',
  'an API key': 'sk-[A-Za-z0-9_-]{20,}',
  'a GitHub token': 'gh[pousr]_[A-Za-z0-9]{36,}',
  'a private key': '-----BEGIN [A-Z ]*PRIVATE KEY-----',
}

function strings(value: Json, out: string[] = []): string[] {
  if (typeof value === 'string') out.push(value)
  else if (value !== null && typeof value === 'object') for (const item of Object.values(value)) strings(item, out)
  return out
}

function redact(value: Json, pattern: RegExp): Json {
  if (typeof value === 'string') return value.replace(pattern, '[redacted]')
  if (Array.isArray(value)) return value.map((item) => redact(item, pattern))
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, redact(item, pattern)]))
  return value
}

export const name = 'secrets-guard'
export const inject = ['tools']
export const reusable = true

export interface Config {
  /** extra kinds of secret: a label ("a Slack token") → a regular expression */
  patterns: Record<string, string>
  /** mask secrets found in results */
  redact: boolean
  /** agents (by name) that may not call tools annotated destructive */
  cautious: string[]
}

// strict: a misspelt key (`cautous`) stops the plugin from starting instead of silently turning a rule off
/** what a deployer writes: every key optional */
export type ConfigInput = Partial<Config>

export const Config = defineConfig<Config, ConfigInput>()(
  Schema.object({
    patterns: Schema.dict(Schema.string()).default({}).description('extra kinds of secret: a label → a regular expression'),
    redact: Schema.boolean().default(true).description('mask secrets found in results'),
    cautious: Schema.array(Schema.string()).default([]).description('agents that may not call tools annotated destructive'),
  }),
)

export function apply(ctx: Context, config: Config) {
  const kinds = Object.entries({ ...BUILT_IN, ...config.patterns }).map(([label, source]) => ({ label, pattern: new RegExp(source) }))
  const any = new RegExp(kinds.map((kind) => `(?:${kind.pattern.source})`).join('|'), 'g')

  ctx.tools.listen('tools/pre-execute', (exec: Execution) => {
    for (const text of strings(exec.arguments)) {
      const kind = kinds.find((k) => k.pattern.test(text))
      if (kind) {
        return {
          kind: 'deny',
          reason:
            `secrets-guard: the arguments of "${exec.name}" contain what looks like ${kind.label}. ` +
            'Never put credentials in tool arguments; refer to them by the name of the environment variable or secret that holds them.',
        }
      }
    }
  })

  if (config.redact) {
    // a success is redacted in its value, so the rendering and a run_code program (which gets the value) never see
    // the secret; an error has only content
    ctx.tools.listen('tools/post-execute', (_exec, result) => {
      if (result.isError) {
        const content = result.content.replace(any, '[redacted]')
        return content === result.content ? undefined : { kind: 'accept', content }
      }
      if (!strings(result.value).some((text) => text.replace(any, '') !== text)) return
      return { kind: 'accept', value: redact(result.value, any) }
    })
  }

  // synchronous and monotonic: nothing later can turn this denial into permission
  ctx.tools.guard((exec) => {
    if (exec.tool.annotations.destructive !== true || !exec.agent || !config.cautious.includes(exec.agent.name)) return
    return `secrets-guard: agent "${exec.agent.name}" may not call destructive tools such as "${exec.name}"; describe the change and ask the user to make it`
  })
}

// it connects to nothing and writes nothing when it starts: faber replay may start it as it is
export const replay = 'inert'

/** the plugin as one object, for a default import */
export default { name, inject, reusable, Config, apply, replay }
