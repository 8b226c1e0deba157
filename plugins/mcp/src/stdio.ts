// MCP over stdio for the server side: newline-delimited JSON-RPC on a readable and a writable stream. Unlike the
// SDK's StdioServerTransport (which drops what it cannot parse without a word and closes on a message over its buffer
// size), every line is answered by the JSON-RPC rules in jsonrpc.ts, and an oversized message is skipped up to its
// newline and refused with an error reply and a log line; the session goes on.

import type { Readable, Writable } from 'node:stream'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import { ErrorCode, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js'
import { checkLine, errorReply, sniffId } from './jsonrpc.ts'

export const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024

export interface LineTransportOptions {
  input?: Readable
  output?: Writable
  /** the largest message accepted, in bytes (its newline not counted); default 4 MiB */
  maxMessageBytes?: number
  /** told about each refused or dropped message; `severe` for oversized ones */
  onproblem?: (problem: string, severe: boolean) => void
}

const EDGE = 512

export class LineTransport implements Transport {
  onclose?: () => void
  onerror?: (error: Error) => void
  onmessage?: (message: JSONRPCMessage) => void

  private input: Readable
  private output: Writable
  private max: number
  private parts: Buffer[] = []
  private size = 0
  // while skipping an oversized message: its size so far and its first and last bytes (to find its id)
  private skipping?: { size: number; head: string; tail: Buffer }
  private closed = false
  // the requests handed to the server and not answered yet: at the end of the input the session waits for their
  // answers (a client may write its requests and close its side at once: `… | faber mcp deploy.yml`)
  private unanswered = new Map<string | number, number>()
  private ended = false

  constructor(private options: LineTransportOptions = {}) {
    this.input = options.input ?? process.stdin
    this.output = options.output ?? process.stdout
    this.max = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES
  }

  async start() {
    this.input.on('data', this.ondata)
    this.input.on('end', this.onend)
    this.input.on('error', this.onstreamerror)
    // a client that went away makes stdout fail with EPIPE: that ends the session, it must not kill the process
    this.output.on('error', this.onstreamerror)
  }

  private ondata = (chunk: Buffer | string) => {
    const data = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    let from = 0
    while (from <= data.length && !this.closed) {
      const newline = data.indexOf(10, from)
      const end = newline === -1 ? data.length : newline
      this.take(data.subarray(from, end))
      if (newline === -1) break
      this.endLine()
      from = newline + 1
    }
  }

  /** adds bytes to the current line, switching to skipping once it outgrows the limit */
  private take(bytes: Buffer) {
    if (!bytes.length) return
    if (this.skipping) {
      this.skipping.size += bytes.length
      this.skipping.tail = Buffer.concat([this.skipping.tail, bytes.subarray(-EDGE)]).subarray(-EDGE)
      return
    }
    if (this.size + bytes.length <= this.max) {
      this.parts.push(bytes)
      this.size += bytes.length
      return
    }
    const line = Buffer.concat([...this.parts, bytes])
    this.skipping = { size: line.length, head: line.subarray(0, EDGE).toString(), tail: line.subarray(-EDGE) }
    this.parts = []
    this.size = 0
  }

  private endLine() {
    if (this.skipping) {
      const { size, head, tail } = this.skipping
      this.skipping = undefined
      const problem = `a message of ${size} bytes is over the limit of ${this.max} bytes and was dropped (raise maxMessageBytes to accept it)`
      this.options.onproblem?.(problem, true)
      this.reply(errorReply(sniffId(head, tail.toString()), ErrorCode.InvalidRequest, `Invalid Request: ${problem}`))
      return
    }
    const line = Buffer.concat(this.parts).toString('utf8').trim()
    this.parts = []
    this.size = 0
    if (!line) return
    const checked = checkLine(line)
    if ('message' in checked) {
      const message = checked.message as { method?: unknown; id?: string | number; params?: { requestId?: string | number } }
      if (typeof message.method === 'string' && message.id !== undefined) this.unanswered.set(message.id, (this.unanswered.get(message.id) ?? 0) + 1)
      this.onmessage?.(checked.message)
      // a cancelled request is not answered (MCP): nothing is owed for it any more
      if (message.method === 'notifications/cancelled' && message.params?.requestId !== undefined) this.answered(message.params.requestId)
      return
    }
    this.options.onproblem?.(checked.problem, false)
    if (checked.reply) this.reply(checked.reply)
  }

  private onend = () => {
    // a last message without its newline still counts
    if (this.size || this.skipping) this.endLine()
    this.ended = true
    if (!this.unanswered.size) void this.close()
  }

  private onstreamerror = (error: Error) => {
    this.onerror?.(error)
    void this.close()
  }

  private reply(message: JSONRPCMessage) {
    this.send(message).catch(() => {})
  }

  send(message: JSONRPCMessage): Promise<void> {
    if (this.closed) return Promise.resolve()
    const written = new Promise<void>((resolve) => {
      if (this.output.write(`${JSON.stringify(message)}\n`)) resolve()
      else this.output.once('drain', resolve)
    })
    const answer = message as { id?: string | number; result?: unknown; error?: unknown }
    if (answer.id !== undefined && ('result' in answer || 'error' in answer)) this.answered(answer.id, written)
    return written
  }

  /** one answer to `id` is no longer owed; the input having ended, the session ends with the last one (once written) */
  private answered(id: string | number, written: Promise<void> = Promise.resolve()) {
    const owed = this.unanswered.get(id)
    if (owed === undefined) return
    if (owed > 1) this.unanswered.set(id, owed - 1)
    else this.unanswered.delete(id)
    if (this.ended && !this.unanswered.size) void written.then(() => this.close())
  }

  async close() {
    if (this.closed) return
    this.closed = true
    this.input.off('data', this.ondata)
    this.input.off('end', this.onend)
    // the output's error listener stays: a write still in flight may fail after closing
    this.input.off('error', this.onstreamerror)
    if (this.input.listenerCount('data') === 0) this.input.pause()
    this.parts = []
    this.skipping = undefined
    this.onclose?.()
  }
}
