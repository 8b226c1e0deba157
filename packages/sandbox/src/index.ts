import type { ProcessBackend } from './process-sandbox.ts'
import { SandboxService } from './service.ts'
import { WorkerSandbox } from './worker-sandbox.ts'

export type { Program, ProgramHandle, ProgramReports, Refusal, SandboxDriver, Unit } from './contract.ts'
export { type ProcessBackend, ProcessSandbox, type ProcessSandboxOptions } from './process-sandbox.ts'
export { type Pool, SandboxService } from './service.ts'
export * from './types.ts'
export { WorkerSandbox, type WorkerSandboxOptions } from './worker-sandbox.ts'

// the driver's module for the process tier: plain js, which the sandbox process loads on plain node from src/ and dist/
export const workerBackend: ProcessBackend = Object.freeze({
  module: new URL('./worker-driver.mjs', import.meta.url).href,
  exportName: 'WorkerDriver',
  name: 'worker-vm',
})

/** provides `ctx.codeRuntime`: programs run in pooled worker threads, a fresh vm context each */
const WorkerSandboxService = SandboxService.define(workerBackend, (config) => new WorkerSandbox(config), SandboxService.HandoffConfig)
type WorkerSandboxService = InstanceType<typeof WorkerSandboxService>

export default WorkerSandboxService
