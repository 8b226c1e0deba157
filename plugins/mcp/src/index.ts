export * from './client.ts'
export { renderContent, toCallToolResult } from './content.ts'
export { type ImportedSchema, importSchema } from './schema.ts'
export { elicitApproval, type McpServing, type ServeOptions, serveMcp, wireTools } from './server.ts'
