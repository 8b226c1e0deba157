import { extname } from 'node:path'
import { defineConfig } from '@faber/core'
import { type ProcessBackend, SandboxService } from '@faber/sandbox'
import { type Context, Schema } from 'cordis'
import { QuickJsSandbox } from './quickjs-sandbox.ts'

export { QuickJsSandbox, type QuickJsSandboxOptions } from './quickjs-sandbox.ts'

// the backend module beside this one as it runs, for the process tier
export const quickJsBackend: ProcessBackend = Object.freeze({
  module: new URL(`./quickjs-sandbox${extname(import.meta.url)}`, import.meta.url).href,
  exportName: 'quickJsDriver',
  name: 'quickjs-wasm',
})

/** provides `ctx.codeRuntime`: programs run in QuickJS compiled to WebAssembly, each unit on a worker thread of its own */
class QuickJsSandboxService extends SandboxService {
  static name = 'codeRuntime'
  static inject: string[] = []
  declare config: QuickJsSandboxService.Config

  constructor(ctx: Context, config: QuickJsSandboxService.ConfigInput = {}) {
    super(ctx, config, quickJsBackend, (config) => new QuickJsSandbox(config), QuickJsSandboxService.Config)
  }
}

namespace QuickJsSandboxService {
  export type Config = SandboxService.Config
  export type ConfigInput = SandboxService.ConfigInput
  // in-process by default: a bomb fills a WebAssembly memory with a maximum, never the host's V8 heap (README)
  export const Config = defineConfig<SandboxService.Config, SandboxService.ConfigInput>()(
    Schema.object({ ...SandboxService.fields, isolation: SandboxService.fields.isolation.default('in-process') }),
  )
}

export default QuickJsSandboxService
