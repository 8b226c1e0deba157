import { extname } from 'node:path'
import type { Context } from 'cordis'
import { SandboxService } from './service.ts'
import { WorkerSandbox } from './worker-sandbox.ts'

export type { Program, ProgramHandle, ProgramReports, Refusal, SandboxDriver, Unit } from './contract.ts'
export { defaultMaxConcurrent } from './gate.ts'
export { ProcessSandbox, type ProcessSandboxOptions } from './process-sandbox.ts'
export { type Pool, type ProcessBackend, SandboxService } from './service.ts'
export * from './types.ts'
export { WorkerSandbox, type WorkerSandboxOptions } from './worker-sandbox.ts'

// the backend module beside this one as it runs (src/*.ts from source, dist/*.js once built), for the process tier.
// made once here, not in every context setup
const backend = Object.freeze({
  module: new URL(`./worker-sandbox${extname(import.meta.url)}`, import.meta.url).href,
  exportName: 'WorkerSandbox',
  name: 'worker-vm',
})

/** provides `ctx.codeRuntime`: programs run in pooled worker threads, a fresh vm context each */
class WorkerSandboxService extends SandboxService {
  static name = 'codeRuntime'
  static inject: string[] = []
  readonly backend = 'worker-vm'
  declare config: WorkerSandboxService.Config

  constructor(ctx: Context, config: WorkerSandboxService.ConfigInput = {}) {
    super(ctx, config, backend, (config) => new WorkerSandbox(config), WorkerSandboxService.Config)
  }
}

namespace WorkerSandboxService {
  export type Config = SandboxService.HandoffConfig
  export type ConfigInput = SandboxService.HandoffConfigInput
  export const Config = SandboxService.HandoffConfig
}

export default WorkerSandboxService
