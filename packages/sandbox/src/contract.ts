// the contract between the host side every backend shares (the pool, the cap, the budgets, the bridge) and a backend: a
// driver that makes units for a memory budget, starts a program in one with a typed sink for what it reports, and ends
// or disposes them. what a program reports through an untyped channel (a thread's messages, an isolate's callback) is
// checked in one place, `report`, whichever channel it came through

import type { BridgeReply, CodeFailureKind, CodeRunLimits, CodeRunRequest } from './types.ts'

/** a unit (a worker, an isolate): the memory budget it was made for, and the runs it served (the pool counts them) */
export interface Unit {
  readonly memoryMb: number
  runs: number
}

/** a program to start: the request, its limits filled in, and its source wrapped as the prelude expects (`wrapProgram`) */
export interface Program {
  readonly request: CodeRunRequest
  readonly limits: CodeRunLimits
  readonly source: string
}

/** why the prelude or the unit refused what a program asked for, ending the run as `memory` */
export type Refusal = 'argument' | 'buffers' | 'waiting'

/**
 * what a running program reports, typed. a driver hands each report here as it comes; the first end (`done`, `threw`,
 * `overOutput`, `refused`, `failed`) ends the run, and everything after it is dropped. `heap` is what the unit holds
 * after a clean end, so the pool can tell whether it may serve again; left out, the unit serves no more runs
 */
export interface ProgramReports {
  /** whether the run has ended: nothing more is taken */
  ended(): boolean
  /**
   * a tool call made at `site` (where in the program, as the prelude numbers it: see bridge.ts, callSite); its argument
   * is checked against the limit before it is forwarded
   */
  call(call: number, name: string, json: string, site?: number): void
  /** a line printed; false once the output budget ran out (the run has ended) */
  log(line: string): boolean
  /** the program returned (`result` the JSON text of its value, undefined for none) */
  done(result: string | undefined, heap?: number): void
  /** the program threw */
  threw(message: string, line?: number, column?: number, heap?: number): void
  /** it printed or returned more than outputBytes */
  overOutput(): void
  /** the prelude or the unit refused what it asked for (its memory) */
  refused(reason: Refusal): void
  /** the unit failed: its memory limit, a crash, a budget only it can see; the unit is discarded */
  failed(kind: CodeFailureKind, message: string): void
  /** clock readings and random numbers the program read, in order (when the request records them: CodeRunRequest.values) */
  values(values: number[]): void
}

/** a program started in a unit, as the host sees it */
export interface ProgramHandle {
  /** hands a bounded reply to the program */
  deliver(call: number, reply: BridgeReply): void
  /** ms of cpu the program spent so far (a promise of it, from a unit in another process); undefined once it cannot tell (the pool stops polling) */
  cpuUsed(): number | undefined | Promise<number | undefined>
  /** the run ended: take the driver's listeners off. `reuse` says whether the unit serves another run */
  end(reuse: boolean): void
}

/** a backend */
export interface SandboxDriver<U extends Unit = Unit> {
  /** the backend's name (`worker-vm`, `isolated-vm`) */
  readonly backend: string
  /** what a run that got no unit reports first, e.g. `could not start a sandbox worker` */
  readonly createFailure: string
  /** makes a unit whose programs get `memoryMb`; `lost` is called once it died or may serve no more runs. a throw is the run's to report */
  create(memoryMb: number, lost: () => void): U | Promise<U>
  /** starts `program` in `unit`; what it reports goes to `reports` (from now on, or later: never before this returns) */
  start(unit: U, program: Program, reports: ProgramReports): ProgramHandle
  /** ends a unit for good */
  dispose(unit: U): unknown
  /** the pool closed and disposed its idle units: ends what the driver holds besides (`busy`: runs were going on) */
  close?(busy: boolean): void
}

export { messageOf } from '@faber/core/message'
export { argumentBytes, limitMessages, maxPendingCalls, overheadMb } from './budgets.mjs'
export * from './lane.mjs'
// what a backend builds on besides the contract (`@faber/sandbox/contract`, the one entry for backends): the pool it
// extends, the prelude it evaluates, the budgets and messages every backend says alike, the hand-off lanes
export { type PoolOptions, SandboxPool } from './pool.ts'
export { callsSource, preludeSource, workerTexts, wrapProgram } from './prelude.mjs'
export { report } from './report.mjs'
