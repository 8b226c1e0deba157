import { extname } from 'node:path'
import { type ProcessBackend, SandboxService } from '@faber/sandbox'
import { IsolateSandbox } from './isolate-sandbox.ts'

export type { BridgeReply, CodeFailureKind, CodeRunLimits, CodeRunOutcome, CodeRunRequest, CodeRuntime, CodeRuntimeLoad } from '@faber/core/code-runtime'
export { defaultCodeLimits } from '@faber/core/code-runtime'
export { IsolateSandbox, type IsolateSandboxOptions } from './isolate-sandbox.ts'

// for the process tier: the driver's module beside this one as it runs (src/*.ts, or dist/*.js once built)
export const isolateBackend: ProcessBackend = Object.freeze({
  module: new URL(`./isolate-sandbox${extname(import.meta.url)}`, import.meta.url).href,
  exportName: 'IsolateDriver',
  name: 'isolated-vm',
  // isolated-vm asks for it on node 20 and later (its README)
  execArgv: ['--no-node-snapshot'],
})

/** provides `ctx.codeRuntime`: programs run in V8 isolates (isolated-vm), a fresh context each */
const IsolateSandboxService = SandboxService.define(isolateBackend, (config) => new IsolateSandbox(config), SandboxService.HandoffConfig)
type IsolateSandboxService = InstanceType<typeof IsolateSandboxService>

export default IsolateSandboxService
