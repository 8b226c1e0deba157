// the types of worker-driver.mjs, which is plain js so that a sandbox process loads it without a TypeScript loader. its
// units are the pool's to count and the driver's to use: what else a unit holds is the driver's own (worker-driver.mjs)
import type { SandboxDriver } from './contract.ts'
import type { HandoffTally } from './lane.mjs'

/** the worker_threads backend: a unit is a worker, each program a fresh vm context in it */
export declare class WorkerDriver implements SandboxDriver {
  readonly backend: string
  readonly createFailure: string
  readonly spinMs: number
  /** what the shared buffers of the workers, alive and ended, counted (for `handoffStats`) */
  readonly handoffs: HandoffTally
  constructor(options?: { spinMs?: number })
  create: SandboxDriver['create']
  start: SandboxDriver['start']
  dispose: SandboxDriver['dispose']
}
