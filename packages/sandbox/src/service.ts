// the Cordis face shared by the sandbox backends: a service at `ctx.codeRuntime` around a pool that is closed with it

import { CodeRunLimits as CodeRunLimitsSchema, defineConfig, warmRunCode } from '@faber/core'
import { type Context, Schema, Service } from 'cordis'
import { defaultMaxConcurrent } from './gate.ts'
import { type ProcessBackend, ProcessSandbox } from './process-sandbox.ts'
import type { CodeRunLimits, CodeRunOutcome, CodeRunRequest, CodeRuntime, CodeRuntimeLoad } from './types.ts'

export interface Pool extends CodeRuntime {
  close(): Promise<void>
  load(): CodeRuntimeLoad
  /** resolves once the pool started in the background at construction is warm */
  ready(): Promise<void>
}

export abstract class SandboxService<P extends Pool = Pool, C extends SandboxService.Config = SandboxService.Config> extends Service implements CodeRuntime {
  /** starting it starts units that run nothing until asked, and a replay never asks (run_code's body does not run) */
  static replay = 'inert' as const
  declare ctx: Context
  declare config: C
  /** `worker-vm`, `isolated-vm`...: its process tier's descriptor names it once for both tiers */
  readonly backend: string
  readonly sandbox: P
  // the pool's warm-up, then the host's (its run_code path, once per process: see @faber/core's warmRunCode)
  private warm: Promise<void>
  private stopped = false

  /**
   * a backend's service class, `ctx.codeRuntime`: `backend` names the driver the sandbox process runs under
   * `isolation: process`, `create` makes the in-process sandbox under `isolation: in-process`
   */
  static define<C extends SandboxService.Config>(backend: ProcessBackend, create: (config: C) => Pool, Config: Schema<Partial<C>, C>): SandboxService.Class<C> {
    const Defined = class extends SandboxService<Pool, C> {
      static name = 'codeRuntime'
      static inject: string[] = []

      constructor(ctx: Context, config: Partial<C> = {}) {
        super(ctx, config, backend, create, Config)
      }
    }
    // assigned, not a static field: a field's type would have to fit the base's Config, the one without spinMs
    return Object.assign(Defined, { Config })
  }

  constructor(ctx: Context, config: Partial<C>, backend: ProcessBackend, create: (config: C) => P, schema: Schema<Partial<C>, C>) {
    super(ctx, 'codeRuntime', true)
    this.backend = backend.name
    this.config = schema(config)
    this.sandbox = this.config.isolation === 'process' ? (new ProcessSandbox({ ...this.config, backend }) as Pool as P) : create(this.config)
    this.warm = this.sandbox.ready().then(async () => {
      if (!this.stopped) await warmRunCode()
    })
  }

  run(request: CodeRunRequest): Promise<CodeRunOutcome> {
    return this.sandbox.run(request)
  }

  /**
   * resolves once the pool is warm, and with it the host's run_code path (the first service in the process runs one
   * program through it, unseen): the first run then costs what a warm one does. nothing needs to wait for it
   */
  ready(): Promise<void> {
    return this.warm
  }

  load(): CodeRuntimeLoad {
    return this.sandbox.load()
  }

  protected async stop() {
    this.stopped = true
    await this.sandbox.close()
    // the host's warm-up uses no sandbox and ends by itself: its private context is stopped before this returns
    await this.warm
  }
}

export namespace SandboxService {
  export type Isolation = 'process' | 'in-process'

  /** what `define` makes: a service class with cordis' static name, inject and Config */
  export interface Class<C extends Config> {
    new (ctx: Context, config?: Partial<C>): SandboxService<Pool, C>
    readonly inject: string[]
    readonly Config: Schema<Partial<C>, C>
  }

  export interface Config {
    isolation: Isolation
    poolSize: number
    maxConcurrent: number
    /** what a request leaves out; the sandbox fills the rest from `defaultCodeLimits` */
    limits: Partial<CodeRunLimits>
  }

  /** what a deployer writes: every key optional */
  export type ConfigInput = Partial<Config>

  /** the schemas of the keys every backend's service takes, for a backend whose Config adds its own */
  export const fields = {
    isolation: Schema.union(['process', 'in-process'] as const)
      .default('process')
      .description(
        'process: programs run in a supervised child process whose death the host survives; in-process: in threads of the host (a fatal out-of-memory there ends a host running workers; one running isolates survives it, but once an isolate is parked it can end only by a signal)',
      ),
    maxConcurrent: Schema.natural().min(1).default(defaultMaxConcurrent()).description('programs running at once across the deployment; more wait in order'),
    poolSize: Schema.natural().min(1).default(2).description('sandboxes kept started and waiting'),
    limits: CodeRunLimitsSchema.default({}).description('limits for a request that leaves some out; memoryMb also sizes the pooled sandboxes'),
  }

  export const Config = defineConfig<Config, ConfigInput>()(Schema.object(fields))

  /** the config of a backend whose nested calls hand off with a spin (the worker's; the isolate's in-process) */
  export interface HandoffConfig extends Config {
    /** the longest either side of a nested call spins for the other's answer (the backend's `spinMs` option) */
    spinMs: number
  }

  export type HandoffConfigInput = Partial<HandoffConfig>

  export const HandoffConfig = defineConfig<HandoffConfig, HandoffConfigInput>()(
    Schema.object({
      ...fields,
      spinMs: Schema.number()
        .min(0)
        .max(1)
        .default(0.05)
        .description(
          'ms either side of a nested call spins for the answer before it sleeps (0: never); only while one run is going on, backing off after misses',
        ),
    }),
  )
}

// resolved once as the module loads, as the core does with its own: the first context set up in the process then finds
// the schema's code warm
SandboxService.Config({})
