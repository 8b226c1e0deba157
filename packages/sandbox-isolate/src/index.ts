import { type Context, Schema, Service } from 'cordis'
import { IsolateSandbox } from './isolate-sandbox.ts'
import { type CodeRunLimits, type CodeRunOutcome, type CodeRunRequest, type CodeRuntime, defaultCodeLimits } from './types.ts'

export { IsolateSandbox, type IsolateSandboxOptions } from './isolate-sandbox.ts'
export * from './types.ts'

/** provides `ctx.codeRuntime`: programs run in V8 isolates (isolated-vm), a fresh context each */
class IsolateSandboxService extends Service implements CodeRuntime {
  declare ctx: Context
  declare config: IsolateSandboxService.Config
  readonly backend = 'isolated-vm'
  readonly sandbox: IsolateSandbox

  constructor(ctx: Context, config: IsolateSandboxService.Input = {}) {
    super(ctx, 'codeRuntime', true)
    this.config = IsolateSandboxService.Config(config)
    this.sandbox = new IsolateSandbox(this.config)
  }

  run(request: CodeRunRequest): Promise<CodeRunOutcome> {
    return this.sandbox.run(request)
  }

  protected stop() {
    return this.sandbox.close()
  }
}

namespace IsolateSandboxService {
  export interface Config {
    poolSize: number
    limits: CodeRunLimits
  }

  /** what a deployer writes: every key optional, limits partial */
  export type Input = { poolSize?: number; limits?: Partial<CodeRunLimits> }

  export const Limits: Schema<Partial<CodeRunLimits>, CodeRunLimits> = Schema.object({
    cpuMs: Schema.natural().min(1).default(defaultCodeLimits.cpuMs).description('compute budget in ms; time spent awaiting tools does not count'),
    wallMs: Schema.natural().min(1).default(defaultCodeLimits.wallMs).description('wall-clock budget in ms, waits included'),
    memoryMb: Schema.natural().min(8).default(defaultCodeLimits.memoryMb).description('isolate memory limit in MB, array buffers included'),
    outputBytes: Schema.natural().min(1).default(defaultCodeLimits.outputBytes).description('budget for printed output plus the JSON of the result'),
  })

  export const Config: Schema<Input, Config> = Schema.object({
    poolSize: Schema.natural().min(1).default(2).description('warm isolates kept waiting'),
    limits: Limits.default({} as CodeRunLimits).description('limits for a request that leaves some out; memoryMb also sizes the pooled isolates'),
  }) as Schema<Input, Config>
}

export default IsolateSandboxService
