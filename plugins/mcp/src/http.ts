// MCP over streamable HTTP: one endpoint (`/mcp`), one serveMcp session per MCP session, so each client's calls,
// approvals and cancellations stay its own. Host and Origin are checked before anything else (DNS rebinding).

import { randomUUID } from 'node:crypto'
import { createServer, type Server as HttpServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { ErrorCode, isInitializeRequest } from '@modelcontextprotocol/sdk/types.js'
import type { Context } from 'cordis'
import { checkMessage } from './jsonrpc.ts'
import { type McpServing, type ServeOptions, serveMcp } from './server.ts'
import { DEFAULT_MAX_MESSAGE_BYTES } from './stdio.ts'

export interface HttpServeOptions extends Omit<ServeOptions, 'transport'> {
  /** the address to listen on; default 127.0.0.1 */
  host?: string
  /** default 0 (any free port; read it from `url`) */
  port?: number
  /**
   * host names (no port) a request's Host and Origin may name. Default: `localhost`, `127.0.0.1` and `[::1]`, plus
   * `host` when it is something else. Anything else is refused with 403 (DNS rebinding protection).
   */
  allowedHosts?: string[]
}

export interface McpHttpServing {
  /** the MCP endpoint, e.g. http://127.0.0.1:3000/mcp */
  readonly url: string
  readonly http: HttpServer
  /** the MCP sessions open now */
  sessions(): number
  /** closes every session and the listener */
  close(): Promise<void>
}

const LOOPBACK = ['localhost', '127.0.0.1', '[::1]']

function hostnameOf(value: string, withScheme: boolean): string | undefined {
  try {
    return new URL(withScheme ? value : `http://${value}`).hostname.toLowerCase()
  } catch {
    return undefined
  }
}

function refuse(res: ServerResponse, status: number, code: number, message: string) {
  if (res.headersSent) return res.end()
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code, message } }))
}

/** reads a body up to `max` bytes; undefined when it is larger (the rest is drained, not kept) */
function readBody(req: IncomingMessage, max: number): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = []
    let size = 0
    req.on('data', (chunk: Buffer) => {
      size += chunk.length
      if (size <= max) parts.push(chunk)
    })
    req.on('end', () => resolve(size > max ? undefined : Buffer.concat(parts).toString('utf8')))
    req.on('error', reject)
  })
}

/** serves a deployment's tools over MCP streamable HTTP; see serveMcp for what a session serves */
export async function serveMcpHttp(ctx: Context, options: HttpServeOptions = {}): Promise<McpHttpServing> {
  const logger = ctx.logger('mcp')
  const host = options.host ?? '127.0.0.1'
  const bare = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host
  const allowed = new Set((options.allowedHosts ?? [...LOOPBACK, bare]).map((name) => name.toLowerCase()))
  const max = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES
  const sessions = new Map<string, { transport: StreamableHTTPServerTransport; serving: McpServing }>()
  const { maxMessageBytes: _, host: __, port: ___, allowedHosts: ____, ...sessionOptions } = options

  async function handle(req: IncomingMessage, res: ServerResponse) {
    const url = new URL(req.url ?? '/', 'http://localhost')
    // DNS rebinding: a page on another site that resolves its name to us names that site in Host and Origin
    const hostname = req.headers.host ? hostnameOf(req.headers.host, false) : undefined
    if (!hostname || !allowed.has(hostname)) {
      logger.warn('refused a request for Host %s (allowed: %s)', req.headers.host ?? '(none)', [...allowed].join(', '))
      return refuse(res, 403, -32000, `Forbidden: Host ${JSON.stringify(req.headers.host ?? '')} is not allowed`)
    }
    const origin = req.headers.origin
    if (origin !== undefined && !allowed.has(hostnameOf(origin, true) ?? '')) {
      logger.warn('refused a request from Origin %s', origin)
      return refuse(res, 403, -32000, `Forbidden: Origin ${JSON.stringify(origin)} is not allowed`)
    }
    if (url.pathname !== '/mcp') return refuse(res, 404, -32000, `Not found: the MCP endpoint is /mcp`)

    const id = req.headers['mcp-session-id']
    const sessionId = Array.isArray(id) ? id[0] : id
    let body: unknown
    if (req.method === 'POST') {
      const text = await readBody(req, max)
      if (text === undefined) {
        logger.error('refused a request body over the limit of %d bytes', max)
        return refuse(res, 413, ErrorCode.InvalidRequest, `Invalid Request: the body is over the limit of ${max} bytes`)
      }
      try {
        body = JSON.parse(text)
      } catch (error) {
        return refuse(res, 400, ErrorCode.ParseError, `Parse error: ${(error as Error).message}`)
      }
      const checked = checkMessage(body)
      if (!('message' in checked) && checked.reply) {
        res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify(checked.reply))
        return
      }
    }
    if (sessionId !== undefined) {
      const session = sessions.get(sessionId)
      if (!session) return refuse(res, 404, -32001, 'Session not found: start a new one with initialize')
      return session.transport.handleRequest(req, res, body)
    }
    if (req.method !== 'POST' || !isInitializeRequest(body))
      return refuse(res, 400, -32000, 'Bad Request: no Mcp-Session-Id header; the first request of a session is initialize')

    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: randomUUID,
      onsessioninitialized: (sid) => void sessions.set(sid, { transport, serving }),
    })
    const serving = await serveMcp(ctx, { ...sessionOptions, transport })
    serving.closed.then(() => {
      if (transport.sessionId) sessions.delete(transport.sessionId)
    })
    await transport.handleRequest(req, res, body)
    // an initialize the transport refused leaves no session behind
    if (!transport.sessionId) await serving.close()
  }

  const http = createServer((req, res) => {
    handle(req, res).catch((error: Error) => {
      logger.error('MCP HTTP request failed: %s', error.stack ?? error.message)
      refuse(res, 500, ErrorCode.InternalError, 'Internal error')
    })
  })
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject)
    http.listen(options.port ?? 0, host, () => {
      http.off('error', reject)
      resolve()
    })
  })
  const address = http.address() as AddressInfo
  const url = `http://${bare}:${address.port}/mcp`
  let closing: Promise<void> | undefined
  return {
    url,
    http,
    sessions: () => sessions.size,
    close() {
      closing ??= (async () => {
        await Promise.all([...sessions.values()].map(({ serving }) => serving.close()))
        sessions.clear()
        http.closeAllConnections()
        await new Promise<void>((resolve) => http.close(() => resolve()))
      })()
      return closing
    },
  }
}
