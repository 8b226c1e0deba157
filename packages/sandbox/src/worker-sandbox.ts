import type { Unit } from './contract.ts'
import type { LaneCounts } from './lane.mjs'
import { type PoolOptions, SandboxPool } from './pool.ts'
import { WorkerDriver } from './worker-driver.mjs'

export interface WorkerSandboxOptions extends Omit<PoolOptions, 'maxRuns'> {
  /** runs a worker serves before it is replaced (default 200); it is replaced sooner once its heap is half full */
  maxRunsPerWorker?: number
  /**
   * the longest either side of a nested call spins for the other's answer before it sleeps (default 0.05; 0 never). not
   * while more than one run is going on in the process; a spin that caught nothing makes the next 1, 3, 7 … 255 sleep
   */
  spinMs?: number
}

/** the default CodeRuntime: a pool of pre-spawned worker threads, a fresh vm context per run */
export class WorkerSandbox extends SandboxPool<Unit> {
  readonly spinMs: number
  declare protected readonly driver: WorkerDriver

  constructor(options: WorkerSandboxOptions = {}) {
    super(new WorkerDriver(options), { ...options, maxRuns: options.maxRunsPerWorker })
    this.spinMs = this.driver.spinMs
  }

  /**
   * what the hand-off did so far, over every worker of this sandbox: the worker's messages and the host's replies, each
   * through the ring or the port, and the receiving side's spins that caught a message or did not (README: the hand-off)
   */
  handoffStats(): { calls: LaneCounts; replies: LaneCounts } {
    return this.driver.handoffs.stats()
  }
}
