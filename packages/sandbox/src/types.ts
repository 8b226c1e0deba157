export type {
  BridgeReply,
  CallSite,
  CodeFailureKind,
  CodeRunLimits,
  CodeRunOutcome,
  CodeRunRequest,
  CodeRuntime,
  CodeRuntimeLoad,
  WaitSignal,
} from '@faber/core/code-runtime'
export { defaultCodeLimits } from '@faber/core/code-runtime'
