// the gate between bytes from an MCP client and the SDK's protocol layer: what is not one valid JSON-RPC 2.0
// message gets the error reply the JSON-RPC specification gives (or, for a notification or a response, nothing but a
// log line), so a client that sends garbage learns why instead of waiting for an answer that never comes.

import { ClientRequestSchema, ErrorCode, type JSONRPCErrorResponse, type JSONRPCMessage, JSONRPCMessageSchema } from '@modelcontextprotocol/sdk/types.js'

export type RequestId = string | number

/** a message the protocol layer may see, or the reply (if any) that refuses it and why */
export type Checked = { message: JSONRPCMessage } | { reply?: JSONRPCErrorResponse; problem: string }

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function validId(id: unknown): id is RequestId {
  return typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id))
}

export function errorReply(id: RequestId | null, code: number, message: string): JSONRPCErrorResponse {
  // the SDK's type wants an id; JSON-RPC answers `null` when the request's id could not be read
  return { jsonrpc: '2.0', id: id as RequestId, error: { code, message } }
}

function refuse(id: unknown, code: number, message: string): Checked {
  return { reply: errorReply(validId(id) ? id : null, code, message), problem: message }
}

// the requests Faber's server answers through the SDK's own schemas: params those refuse are the client's mistake
// (-32602), which the SDK would answer as an internal error (-32603). tools/call checks its params itself, leniently:
// bad arguments are a tool result the model can read
const STRICT_REQUESTS = new Map(
  ClientRequestSchema.options
    .filter((schema) => ['ping', 'initialize', 'tools/list', 'logging/setLevel'].includes(schema.shape.method.value))
    .map((schema) => [schema.shape.method.value as string, schema] as const),
)

/** checks one parsed JSON value (a line of stdio, one HTTP body) against JSON-RPC 2.0 as MCP uses it */
export function checkMessage(value: unknown): Checked {
  if (Array.isArray(value))
    return refuse(
      null,
      ErrorCode.InvalidRequest,
      value.length === 0
        ? 'Invalid Request: an empty array'
        : 'Invalid Request: JSON-RPC batches are not supported (MCP 2025-06-18 removed them); send each message on its own',
    )
  if (!isRecord(value)) return refuse(null, ErrorCode.InvalidRequest, 'Invalid Request: a JSON-RPC message is a JSON object')
  const { id, method } = value
  if (value.jsonrpc !== '2.0') return refuse(id, ErrorCode.InvalidRequest, 'Invalid Request: "jsonrpc" must be exactly "2.0"')
  if (method === undefined) {
    // a response to one of our requests (elicitation): never answered, whatever is wrong with it
    if ('result' in value || 'error' in value) {
      if (!validId(id)) return { problem: 'a response without a valid id was dropped' }
      const parsed = JSONRPCMessageSchema.safeParse(value)
      return parsed.success ? { message: parsed.data } : { problem: `a malformed response to request ${JSON.stringify(id)} was dropped` }
    }
    return refuse(id, ErrorCode.InvalidRequest, 'Invalid Request: no "method" (a request needs a method; a response needs a result or an error)')
  }
  const notification = !('id' in value)
  if (typeof method !== 'string') {
    if (notification) return { problem: 'a notification whose method is not a string was dropped' }
    return refuse(id, ErrorCode.InvalidRequest, 'Invalid Request: "method" must be a string')
  }
  if (!notification && !validId(id)) return refuse(null, ErrorCode.InvalidRequest, 'Invalid Request: "id" must be a string or a number')
  if ('params' in value && value.params !== undefined && !isRecord(value.params)) {
    if (notification) return { problem: `a "${method}" notification whose params are not an object was dropped` }
    return refuse(id, ErrorCode.InvalidParams, `Invalid params: the params of "${method}" must be an object`)
  }
  const parsed = JSONRPCMessageSchema.safeParse(value)
  if (parsed.success) {
    const strict = notification ? undefined : STRICT_REQUESTS.get(method)
    const params = strict?.safeParse(value)
    if (params && !params.success) {
      const issue = params.error.issues[0]
      const at = issue?.path.length ? `${issue.path.join('.')}: ` : ''
      return refuse(id, ErrorCode.InvalidParams, `Invalid params: ${at}${issue?.message ?? `not the params of "${method}"`}`)
    }
    return { message: parsed.data }
  }
  if (notification) return { problem: `a malformed "${method}" notification was dropped` }
  return refuse(id, ErrorCode.InvalidRequest, `Invalid Request: not a JSON-RPC 2.0 request`)
}

/** parses one line and checks it */
export function checkLine(line: string): Checked {
  let value: unknown
  try {
    value = JSON.parse(line)
  } catch (error) {
    const message = `Parse error: ${(error as Error).message}`
    return { reply: errorReply(null, ErrorCode.ParseError, message), problem: message }
  }
  return checkMessage(value)
}

/**
 * the id of a message too large to parse, read from its first and last bytes: the SDK writes `"id"` last, most
 * writers first. Only a top-level-looking id is taken; otherwise the reply goes to `null`.
 */
export function sniffId(head: string, tail: string): RequestId | null {
  const first = /^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")\s*,/.exec(head)
  const last = /,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")\s*\}\s*$/.exec(tail)
  const found = first?.[1] ?? last?.[1]
  if (found === undefined) return null
  try {
    const id = JSON.parse(found)
    return validId(id) ? id : null
  } catch {
    return null
  }
}
