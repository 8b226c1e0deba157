// test helpers beyond @faber/core/testing (deployments, calls): the servers under test, and waiting for a server's state

import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Context, Logger } from 'cordis'
import type * as mcp from '../src/index.ts'
import { type ServerName, serverScript } from './fixtures/servers.ts'

Logger.levels.base = 0

export const repoRoot = join(import.meta.dirname, '../../..')

export function tempDir() {
  return mkdtempSync(join(tmpdir(), 'faber-mcp-'))
}

/** the config of one npm server started with this node */
export function npmServer(name: ServerName, dir: string, extra: Partial<mcp.McpClientServer> = {}) {
  const args = name === 'filesystem' ? [serverScript(name), dir] : [serverScript(name)]
  const env = name === 'memory' ? { MEMORY_FILE_PATH: join(dir, 'memory.jsonl') } : undefined
  return { name, command: process.execPath, args, env, ...extra }
}

/** the config of a TypeScript fixture server run through tsx */
export function fixtureServer(name: string, file: string, extra: Partial<mcp.McpClientServer> = {}) {
  return { name, command: process.execPath, args: ['--import', 'tsx', join(import.meta.dirname, 'fixtures', file)], cwd: repoRoot, ...extra }
}

/** resolves with the next status of `server` that satisfies `test` */
export function nextStatus(ctx: Context, server: string, test: (status: mcp.McpStatus) => boolean, timeoutMs = 10000) {
  return new Promise<mcp.McpStatus>((resolve, reject) => {
    const timer = setTimeout(() => {
      dispose()
      reject(new Error(`server "${server}" did not reach the expected status within ${timeoutMs} ms`))
    }, timeoutMs)
    const dispose = ctx.on('mcp/status', (status) => {
      if (status.server !== server || !test(status)) return
      clearTimeout(timer)
      dispose()
      resolve(status)
    })
  })
}

/** resolves with what `promise` resolves to, or fails clearly after `timeoutMs` (a safety net, not a wait) */
export function within<T>(promise: Promise<T>, what: string, timeoutMs = 10000) {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not happen within ${timeoutMs} ms`)), timeoutMs)
    promise.then(
      (value) => {
        clearTimeout(timer)
        resolve(value)
      },
      (error) => {
        clearTimeout(timer)
        reject(error)
      },
    )
  })
}

/**
 * resolves once a call to `name` has been handed to the tool body: an MCP tool's request is written to the server
 * by then (the body runs synchronously down to the transport's write)
 */
export function whenDispatched(ctx: Context, name: string) {
  return new Promise<void>((resolve) => {
    const dispose = ctx.on('tools/execute', (exec, next) => {
      const result = next()
      if (exec.name === name) {
        dispose()
        resolve()
      }
      return result
    })
  })
}
