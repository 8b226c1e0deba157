import { extname } from 'node:path'
import { type ProcessBackend, SandboxService } from '@faber/sandbox'
import type { Context } from 'cordis'
import { IsolateSandbox } from './isolate-sandbox.ts'

export { IsolateSandbox, type IsolateSandboxOptions } from './isolate-sandbox.ts'
export * from './types.ts'

// the backend module beside this one as it runs (src/*.ts from source, dist/*.js once built), for the process tier.
// made once here, not in every context setup
export const isolateBackend: ProcessBackend = Object.freeze({
  module: new URL(`./isolate-sandbox${extname(import.meta.url)}`, import.meta.url).href,
  exportName: 'IsolateDriver',
  name: 'isolated-vm',
  // isolated-vm asks for it on node 20 and later (its README)
  execArgv: ['--no-node-snapshot'],
})

/** provides `ctx.codeRuntime`: programs run in V8 isolates (isolated-vm), a fresh context each */
class IsolateSandboxService extends SandboxService {
  static name = 'codeRuntime'
  static inject: string[] = []
  declare config: IsolateSandboxService.Config

  constructor(ctx: Context, config: IsolateSandboxService.ConfigInput = {}) {
    super(ctx, config, isolateBackend, (config) => new IsolateSandbox(config), IsolateSandboxService.Config)
  }
}

namespace IsolateSandboxService {
  export type Config = SandboxService.HandoffConfig
  export type ConfigInput = SandboxService.HandoffConfigInput
  export const Config = SandboxService.HandoffConfig
}

export default IsolateSandboxService
