import { defineConfig, type Execution } from '@faber/core'
import { type Context, Schema } from 'cordis'

export const name = 'no-dotenv'
export const inject = ['tools']
export const reusable = true

export interface Config {
  /** path fragments a call's arguments may not mention */
  fragments: string[]
}
export type ConfigInput = Partial<Config>

// fails to compile when the schema and the two types drift apart; rejects unknown keys at load
export const Config = defineConfig<Config, ConfigInput>()(
  Schema.object({
    fragments: Schema.array(Schema.string()).default(['.env']).description('path fragments a call may not mention'),
  }),
)

export function apply(ctx: Context, config: Config) {
  ctx.tools.guard((exec: Execution) => {
    const text = JSON.stringify(exec.arguments)
    const found = config.fragments.find((fragment) => text.includes(fragment))
    return found ? `"${found}" is off limits; work without it` : undefined
  })
}

export default { name, inject, reusable, Config, apply }
