export type { BridgeReply, CodeFailureKind, CodeRunLimits, CodeRunOutcome, CodeRunRequest, CodeRuntime } from '@faber/core'
export { defaultCodeLimits } from '@faber/core'
