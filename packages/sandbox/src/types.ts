export type { BridgeReply, CodeFailureKind, CodeRunLimits, CodeRunOutcome, CodeRunRequest, CodeRuntime, CodeRuntimeLoad } from '@faber/core/code-runtime'
export { defaultCodeLimits } from '@faber/core/code-runtime'
