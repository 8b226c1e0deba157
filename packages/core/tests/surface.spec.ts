import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'
import { exportedNames } from './structure.ts'

// @faber/core's public names, as the compiler lists the exports of src/index.ts. a name added or removed is a decision
// about what users build on: make it here, on purpose. compiled tools, the pipeline, run_code's transport, renderers
// and the cordis adapter's internals stay inside the package (core's own specs import them from src).
const VALUES = [
  ...['ABSENT_GLOBALS', 'Agent', 'CODE_ONLY_SECTION', 'Catalog', 'CodeRunLimits', 'ConfigKeyError', 'ERROR_CODES', 'ExecutionToken', 'JsonError'],
  ...['MAX_JSON_DEPTH', 'MAX_JSON_VALUES', 'PROGRAM_GLOBALS', 'PluginStartError', 'RESULT_CHARS', 'RUN_CODE', 'SDK_SECTION', 'SUPPORTED_KEYWORDS'],
  ...['Scheduler', 'SchemaError', 'TIMED_OUT', 'ToolResultError', 'ToolRuntime', 'agentOf', 'assertStarted', 'canonicalJson'],
  ...['checkSchema', 'collapses', 'compileSchema', 'createAgent', 'default', 'defaultCodeLimits', 'defineConfig', 'defineTool'],
  ...[
    'dispatch',
    'emitEach',
    'errorResult',
    'firstAnswer',
    'formatDuration',
    'listenersFor',
    'loadedPlugins',
    'messageOf',
    'nearestKey',
    'ownerOf',
    'pluginFailure',
    'pluginName',
    'replayRole',
  ],
  ...['snapshot'],
  ...['startDeployment', 'strict', 't', 'waitOnPerson', 'warmRunCode', 'withDeadline'],
]
const TYPES = [
  ...[
    'AgentOptions',
    'Answer',
    'ApprovalOutcome',
    'ApprovalRequest',
    'ApprovalService',
    'AskOptions',
    'Audience',
    'BridgeReply',
    'CallRequest',
    'CallSite',
    'CodeCheckpoint',
    'CodeFailureKind',
    'CodeJournalEvent',
  ],
  ...['CodeRunOutcome', 'CodeRunRequest', 'CodeRuntime', 'CodeRuntimeLoad', 'ConversationEndInfo', 'DeniedBy', 'DispatchNext', 'ErrorCode', 'Execution'],
  ...[
    'ExecutionInput',
    'ExecutionMode',
    'Executor',
    'Guard',
    'Infer',
    'InferShape',
    'JournalCall',
    'JournalChange',
    'Json',
    'JsonSchema',
    'JsonType',
    'Listener',
  ],
  ...['Mask', 'Mode', 'ModeOrigin', 'NestedCallSettle', 'NestedCallStart', 'PipelineEvent', 'PostDecision', 'PreDecision'],
  ...['PreparedCall', 'PromptSection', 'RecordedValues', 'ReplayRole', 'SdkPresentation', 'SdkTool', 'SessionEndInfo', 'SessionInfo', 'Stage', 'StageRecord'],
  ...['TSchema', 'ToolAnnotations', 'ToolDefinition', 'ToolErrorInfo', 'ToolFailure', 'ToolInfo', 'ToolOutput', 'ToolResult'],
  ...['ToolRun', 'ToolSchema', 'ToolSuccess', 'TurnInfo', 'TypedToolDefinition', 'Validator', 'WaitSignal', 'WaitingPrograms', 'Wire'],
]

describe("@faber/core's public surface", () => {
  it('exports these names and no others (run-time values, then types)', function () {
    // the compiler reads core and cordis' declarations: seconds on a loaded machine
    this.timeout(120_000)
    const entry = join(dirname(fileURLToPath(import.meta.url)), '../src/index.ts')
    expect(exportedNames(entry)).to.deep.equal({ values: VALUES, types: TYPES })
  })
})
