// the public surface of @faber/core, named one by one: what plugins, deployments and code runtimes build on.
// compiled tools, the pipeline, the run_code transport and the cordis adapter's internals stay inside the package.

export { Agent, type AgentOptions, agentOf, createAgent } from './agent.ts'
export { Catalog } from './catalog.ts'
export type { NestedCallSettle, NestedCallStart } from './code-mode.ts'
export { warmRunCode } from './code-mode-warm.ts'
export type { CodeCheckpoint, CodeJournalEvent, JournalCall, JournalChange } from './code-replay.ts'
export * from './code-runtime.ts'
export { collapses, type Mode } from './collapse.ts'
export { ConfigKeyError, defineConfig, nearestKey, strict } from './config.ts'
export { assertStarted, PluginStartError, pluginFailure, startDeployment } from './context.ts'
export { type Audience, type Listener, listenersFor, loadedPlugins, ownerOf, pluginName } from './cordis.ts'
export { formatDuration, TIMED_OUT, withDeadline } from './deadline.ts'
export { type Answer, type AskOptions, dispatch, emitEach, firstAnswer } from './dispatch.ts'
export type { ConversationEndInfo, SessionEndInfo, SessionInfo, TurnInfo } from './events.ts'
export type * from './execution.ts'
export { canonicalJson, type Json, JsonError, MAX_JSON_DEPTH, MAX_JSON_VALUES, snapshot } from './json.ts'
export { messageOf } from './message.ts'
export { type WaitingPrograms, waitOnPerson } from './person-wait.ts'
export { type ReplayRole, replayRole } from './replay-role.ts'
export {
  type DeniedBy,
  ERROR_CODES,
  type ErrorCode,
  errorResult,
  type Stage,
  type StageRecord,
  type ToolErrorInfo,
  type ToolFailure,
  type ToolResult,
  ToolResultError,
  type ToolSuccess,
} from './result.ts'
export {
  CODE_ONLY_SECTION,
  default,
  type Mask,
  type ModeOrigin,
  type PipelineEvent,
  type PromptSection,
  SDK_SECTION,
  type SdkPresentation,
  ToolRuntime,
  type ToolSchema,
  type Wire,
} from './runtime.ts'
export { type ExecutionMode, Scheduler } from './scheduler.ts'
export {
  checkSchema,
  compileSchema,
  type Infer,
  type InferShape,
  type JsonSchema,
  type JsonType,
  SchemaError,
  SUPPORTED_KEYWORDS,
  type TSchema,
  t,
  type Validator,
} from './schema.ts'
export { ABSENT_GLOBALS, PROGRAM_GLOBALS, type SdkTool } from './sdk.ts'
export {
  defineTool,
  type Execution,
  ExecutionToken,
  RESULT_CHARS,
  RUN_CODE,
  type ToolAnnotations,
  type ToolDefinition,
  type ToolInfo,
  type ToolOutput,
  type ToolRun,
  type TypedToolDefinition,
} from './tool.ts'
