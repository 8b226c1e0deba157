// the types of worker-driver.mjs, which is plain js so that a sandbox process loads it without a TypeScript loader
import type { MessagePort, Worker } from 'node:worker_threads'
import type { SandboxDriver, Unit } from './contract.ts'
import type { Backoff, HandoffTally, Lane } from './lane.mjs'

export interface WorkerSlot extends Unit {
  worker: Worker
  /** replies to the program's calls (lane.mjs) */
  replies: Lane
  /** what the worker sends during a run: calls, logs, its outcome; and the port it comes through when not by the ring */
  inbox: Lane
  inboxPort: MessagePort
  /** the back-off the host and the worker share (lane.mjs) */
  pair: Backoff
  /** ms the worker spent spinning for replies: active time on its event loop that is not the program's */
  waited: Float64Array
}

/** the worker_threads backend: a unit is a worker, each program a fresh vm context in it */
export declare class WorkerDriver implements SandboxDriver<WorkerSlot> {
  readonly backend: string
  readonly createFailure: string
  readonly spinMs: number
  /** what the shared buffers of the workers, alive and ended, counted (for `handoffStats`) */
  readonly handoffs: HandoffTally
  constructor(options?: { spinMs?: number })
  create: SandboxDriver<WorkerSlot>['create']
  start: SandboxDriver<WorkerSlot>['start']
  dispose: SandboxDriver<WorkerSlot>['dispose']
}
