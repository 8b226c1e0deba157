// the Cordis face shared by the sandbox backends: a service at `ctx.codeRuntime` around a pool that is closed with it

import { strict } from '@faber/core'
import { type Context, Schema, Service } from 'cordis'
import { type CodeRunLimits, type CodeRunOutcome, type CodeRunRequest, type CodeRuntime, defaultCodeLimits } from './types.ts'

export interface Pool extends CodeRuntime {
  close(): Promise<void>
}

export abstract class SandboxService<P extends Pool = Pool> extends Service implements CodeRuntime {
  declare ctx: Context
  declare config: SandboxService.Config
  abstract readonly backend: string
  readonly sandbox: P

  constructor(ctx: Context, config: SandboxService.Input, create: (config: SandboxService.Config) => P) {
    super(ctx, 'codeRuntime', true)
    this.config = SandboxService.Config(config)
    this.sandbox = create(this.config)
  }

  run(request: CodeRunRequest): Promise<CodeRunOutcome> {
    return this.sandbox.run(request)
  }

  protected stop() {
    return this.sandbox.close()
  }
}

export namespace SandboxService {
  export interface Config {
    poolSize: number
    limits: CodeRunLimits
  }

  /** what a deployer writes: every key optional, limits partial */
  export type Input = { poolSize?: number; limits?: Partial<CodeRunLimits> }

  export const Limits: Schema<Partial<CodeRunLimits>, CodeRunLimits> = Schema.object({
    cpuMs: Schema.natural().min(1).default(defaultCodeLimits.cpuMs).description('compute budget in ms; time spent awaiting tools does not count'),
    wallMs: Schema.natural().min(1).default(defaultCodeLimits.wallMs).description('wall-clock budget in ms, waits included'),
    memoryMb: Schema.natural().min(8).default(defaultCodeLimits.memoryMb).description('heap budget in MB, array buffers included'),
    outputBytes: Schema.natural().min(1).default(defaultCodeLimits.outputBytes).description('budget for printed output plus the JSON of the result'),
  })

  export const Config: Schema<Input, Config> = strict(
    Schema.object({
      poolSize: Schema.natural().min(1).default(2).description('sandboxes kept started and waiting'),
      limits: Limits.default({} as CodeRunLimits).description('limits for a request that leaves some out; memoryMb also sizes the pooled sandboxes'),
    }),
  )
}
