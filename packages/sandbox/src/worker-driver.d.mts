// the types of worker-driver.mjs (documented there). what a unit holds beyond what the pool counts is the driver's own
import type { SandboxDriver } from './contract.ts'
import type { HandoffTally } from './lane.mjs'

/** the contract's driver, and what the hand-off did */
export interface WorkerDriver extends SandboxDriver {
  readonly spinMs: number
  readonly handoffs: HandoffTally
}
export declare const WorkerDriver: new (options?: { spinMs?: number }) => WorkerDriver
