// the types of worker-driver.mjs (documented there). what a unit holds beyond what the pool counts is the driver's own
import type { SandboxDriver } from './contract.ts'
import type { HandoffTally } from './lane.mjs'

export declare class WorkerDriver implements SandboxDriver {
  readonly backend: string
  readonly createFailure: string
  readonly spinMs: number
  readonly handoffs: HandoffTally
  constructor(options?: { spinMs?: number })
  create: SandboxDriver['create']
  start: SandboxDriver['start']
  dispose: SandboxDriver['dispose']
}
