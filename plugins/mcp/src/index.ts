export * from './client.ts'
export { default } from './client.ts'
export { renderContent, toCallToolResult } from './content.ts'
export { type HttpServeOptions, type McpHttpServing, serveMcpHttp } from './http.ts'
export { type LoginOptions, type LoginResult, login } from './login.ts'
export {
  AuthorizationRequired,
  type McpAuth,
  mask,
  memoryRecord,
  OAuthCallback,
  type OAuthRecord,
  OAuthTable,
  type SavedOAuth,
  StoredOAuthProvider,
} from './oauth.ts'
export { type McpSampled, type McpSampling, samplingMessages } from './sampling.ts'
export { type ImportedSchema, importSchema } from './schema.ts'
export { elicitApproval, logsToStderr, MAX_ARGUMENT_DEPTH, type McpServing, type ServeOptions, serveMcp, wireTools } from './server.ts'
export { DEFAULT_MAX_MESSAGE_BYTES, LineTransport, type LineTransportOptions } from './stdio.ts'
