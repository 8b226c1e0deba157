import { type Context, Schema, Service } from 'cordis'
import { type CodeRunLimits, type CodeRunOutcome, type CodeRunRequest, type CodeRuntime, defaultCodeLimits } from './types.ts'
import { WorkerSandbox } from './worker-sandbox.ts'

export * from './types.ts'
export { WorkerSandbox, type WorkerSandboxOptions } from './worker-sandbox.ts'

/** provides `ctx.codeRuntime`: programs run in pooled worker threads, a fresh vm context each */
class WorkerSandboxService extends Service implements CodeRuntime {
  declare ctx: Context
  declare config: WorkerSandboxService.Config
  readonly backend = 'worker-vm'
  readonly sandbox: WorkerSandbox

  constructor(ctx: Context, config: WorkerSandboxService.Input = {}) {
    super(ctx, 'codeRuntime', true)
    this.config = WorkerSandboxService.Config(config)
    this.sandbox = new WorkerSandbox(this.config)
  }

  run(request: CodeRunRequest): Promise<CodeRunOutcome> {
    return this.sandbox.run(request)
  }

  protected stop() {
    return this.sandbox.close()
  }
}

namespace WorkerSandboxService {
  export interface Config {
    poolSize: number
    limits: CodeRunLimits
  }

  /** what a deployer writes: every key optional, limits partial */
  export type Input = { poolSize?: number; limits?: Partial<CodeRunLimits> }

  export const Limits: Schema<Partial<CodeRunLimits>, CodeRunLimits> = Schema.object({
    cpuMs: Schema.natural().min(1).default(defaultCodeLimits.cpuMs).description('compute budget in ms; time spent awaiting tools does not count'),
    wallMs: Schema.natural().min(1).default(defaultCodeLimits.wallMs).description('wall-clock budget in ms, waits included'),
    memoryMb: Schema.natural().min(8).default(defaultCodeLimits.memoryMb).description('heap budget in MB (and as much again for array buffers)'),
    outputBytes: Schema.natural().min(1).default(defaultCodeLimits.outputBytes).description('budget for printed output plus the JSON of the result'),
  })

  export const Config: Schema<Input, Config> = Schema.object({
    poolSize: Schema.natural().min(1).default(2).description('workers kept spawned and waiting'),
    limits: Limits.default({} as CodeRunLimits).description('limits for a request that leaves some out; memoryMb also sizes the pooled workers'),
  }) as Schema<Input, Config>
}

export default WorkerSandboxService
