import { extname } from 'node:path'
import { defineConfig } from '@faber/core'
import { type Context, Schema } from 'cordis'
import { SandboxService } from './service.ts'
import { WorkerSandbox } from './worker-sandbox.ts'

export { defaultMaxConcurrent } from './gate.ts'
export { ProcessSandbox, type ProcessSandboxOptions } from './process-sandbox.ts'
export { type Pool, type ProcessBackend, SandboxService } from './service.ts'
export * from './types.ts'
export { WorkerSandbox, type WorkerSandboxOptions } from './worker-sandbox.ts'

/** provides `ctx.codeRuntime`: programs run in pooled worker threads, a fresh vm context each */
class WorkerSandboxService extends SandboxService {
  readonly backend = 'worker-vm'
  declare config: WorkerSandboxService.Config

  constructor(ctx: Context, config: WorkerSandboxService.ConfigInput = {}) {
    super(
      ctx,
      config,
      // the backend module beside this one as it runs: src/*.ts from source, dist/*.js once built
      { module: new URL(`./worker-sandbox${extname(import.meta.url)}`, import.meta.url).href, exportName: 'WorkerSandbox', name: 'worker-vm' },
      (config) => new WorkerSandbox(config),
      WorkerSandboxService.Config,
    )
  }
}

namespace WorkerSandboxService {
  export interface Config extends SandboxService.Config {
    /** the longest either side of a nested call spins for the other's answer (WorkerSandboxOptions.spinMs) */
    spinMs: number
  }

  export type ConfigInput = SandboxService.ConfigInput & { spinMs?: number }

  export const Config = defineConfig<Config, ConfigInput>()(
    Schema.object({
      ...SandboxService.fields,
      spinMs: SandboxService.spinMs,
    }),
  )
}

export default WorkerSandboxService
