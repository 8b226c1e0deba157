// @faber/core/testing: what the suites of the core and of plugins built on it share, the way Koishi's plugin-mock
// ships with koishi — a started deployment whose plugin failures throw instead of being only logged, one-line
// calls, and the small tools tests keep writing. it uses no test framework, so any runner can use it.

import { mkdtemp, readFile, realpath, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { Context } from 'cordis'
import type { Agent } from './agent.ts'
import { assertStarted } from './context.ts'
import type { ToolResult } from './result.ts'
import ToolRuntime from './runtime.ts'
import { t } from './schema.ts'
import { defineTool } from './tool.ts'

const live = new Set<Context>()

/**
 * a new Context with the ToolRuntime (configured by `config`) and whatever `setup` loads on it, started; throws the
 * PluginStartError of a plugin that did not start. `disposeAll()` stops it (and every other deployment made here).
 */
export async function deployment(config: ToolRuntime.ConfigInput = {}, setup?: (ctx: Context) => unknown): Promise<Context> {
  const ctx = new Context()
  live.add(ctx)
  ctx.plugin(ToolRuntime, config)
  await setup?.(ctx)
  await ctx.start()
  await assertStarted(ctx)
  return ctx
}

/**
 * stops every deployment `deployment` made that is still running, so nothing outlives its test: an `afterEach` inside
 * a `describe`. not in a root hook (one at the top of a spec file): that runs after every test of the run and would
 * stop deployments other suites made in their `before` hooks
 */
export async function disposeAll(): Promise<void> {
  const contexts = [...live]
  live.clear()
  for (const ctx of contexts) await ctx.stop()
}

export interface Scratch {
  /** a fresh temp directory (its real path), removed by `cleanup` */
  tempDir(prefix?: string): Promise<string>
  /** a deployment for `cleanup` to stop: call it from `deployment`'s setup */
  track(ctx: Context): void
  /** stops the tracked deployments, then removes the temp directories */
  cleanup(): Promise<void>
}

/**
 * one spec file's (or one helpers file's) own deployments and temp directories. its `cleanup` may be a root
 * `afterEach`: it stops only what `track` was given, never other suites' deployments (as disposeAll would)
 */
export function scratch(prefix = 'faber-'): Scratch {
  const dirs: string[] = []
  const started: Context[] = []
  return {
    async tempDir(dirPrefix = prefix) {
      const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), dirPrefix)))
      dirs.push(dir)
      return dir
    },
    track: (ctx) => void started.push(ctx),
    async cleanup() {
      for (const ctx of started.splice(0)) await ctx.stop()
      for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true })
    },
  }
}

/** a signal that is never aborted */
export const signal = (): AbortSignal => new AbortController().signal

let calls = 0
/** a fresh call id */
export const callId = (): string => `call-${++calls}`

export interface CallOptions {
  agent?: Agent
  signal?: AbortSignal
  callId?: string
  session?: string
}

/** runs one model-direct call through the whole pipeline */
export function call(ctx: Context, name: string, args: unknown, options: CallOptions = {}): Promise<ToolResult> {
  const { agent, session } = options
  return ctx.tools.execute({ callId: options.callId ?? callId(), name, arguments: args, signal: options.signal ?? signal(), agent, session })
}

/** the value of a successful result; throws, saying what came instead, for an error */
export function value<T = any>(result: ToolResult): T {
  if (result.isError) throw new Error(`expected a success, got ${result.error.code}: ${result.error.message}`)
  return result.value as T
}

/** `{ text }` in, `{ echoed: text }` out; `onRun` counts the bodies that ran */
export function echoTool(name = 'echo', options: { onRun?: () => void; concurrencySafe?: boolean } = {}) {
  return defineTool({
    name,
    description: `echoes its text (${name})`,
    parameters: t.object({ text: t.string() }),
    output: { schema: t.object({ echoed: t.string() }), render: (_, v) => v.echoed },
    execute: ({ text }) => {
      options.onRun?.()
      return { echoed: text }
    },
    ...(options.concurrencySafe ? { isConcurrencySafe: () => true } : {}),
  })
}

/** a body that always throws an error with a tool code (E_BOOM), so results are TOOL_FAILED with toolCode set */
export function failingTool(name = 'explode') {
  return defineTool({
    name,
    description: 'always fails',
    parameters: t.object({}),
    output: { schema: t.object({}) },
    execute: () => {
      throw Object.assign(new Error('kaboom'), { code: 'E_BOOM' })
    },
  })
}

/** a concurrency-safe body that returns null only once its call is aborted: for cancellation and draining */
export function slowTool(name = 'slow') {
  return defineTool({
    name,
    description: 'Wait until aborted.',
    parameters: t.object({}),
    output: { schema: t.null() },
    isConcurrencySafe: () => true,
    execute: (_, run) =>
      new Promise<null>((resolve) => {
        if (run.signal.aborted) resolve(null)
        else run.signal.addEventListener('abort', () => resolve(null), { once: true })
      }),
  })
}

/** a promise with its resolve and reject, for a test to settle when it chooses */
export function deferred<T = void>() {
  let resolve!: (value: T) => void
  let reject!: (error: unknown) => void
  const promise = new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

/**
 * whether the process `pid` is gone (a zombie counts: it runs nothing) or goes within `withinMs`. it polls: nothing
 * announces the end of a process that is not this one's own child handle
 */
export async function gone(pid: number, withinMs = 3000): Promise<boolean> {
  const deadline = Date.now() + withinMs
  for (;;) {
    if (!running(pid) || (await zombie(pid))) return true
    if (Date.now() >= deadline) return false
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

function running(pid: number) {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

// Linux says so in /proc/<pid>/stat; elsewhere a zombie looks alive until it is reaped
async function zombie(pid: number) {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '')
  const state = stat.replace(/^.*\) /s, '')[0]
  return state === 'Z' || state === 'X'
}
