import { extname } from 'node:path'
import { defineConfig } from '@faber/core'
import { type ProcessBackend, SandboxService } from '@faber/sandbox'
import { Schema } from 'cordis'
import { QuickJsSandbox } from './quickjs-sandbox.ts'

export { QuickJsSandbox, type QuickJsSandboxOptions } from './quickjs-sandbox.ts'

// the backend module beside this one as it runs, for the process tier
export const quickJsBackend: ProcessBackend = Object.freeze({
  module: new URL(`./quickjs-sandbox${extname(import.meta.url)}`, import.meta.url).href,
  exportName: 'quickJsDriver',
  name: 'quickjs-wasm',
})

/** provides `ctx.codeRuntime`: programs run in QuickJS compiled to WebAssembly, each unit on a worker thread of its own */
const QuickJsSandboxService = SandboxService.define(
  quickJsBackend,
  (config) => new QuickJsSandbox(config),
  // in-process by default: a bomb fills a WebAssembly memory with a maximum, never the host's V8 heap (README)
  defineConfig<SandboxService.Config, SandboxService.ConfigInput>()(
    Schema.object({ ...SandboxService.fields, isolation: SandboxService.fields.isolation.default('in-process') }),
  ),
)
type QuickJsSandboxService = InstanceType<typeof QuickJsSandboxService>

export default QuickJsSandboxService
