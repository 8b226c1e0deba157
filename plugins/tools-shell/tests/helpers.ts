// test helpers: a started deployment over a fresh temp workspace, one-line calls, and the bubblewrap policy

import { watch } from 'node:fs'
import { readFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import type { Agent, Mode, ToolResult } from '@faber/core'
import { call as callTool, scratch, deployment as start } from '@faber/core/testing'
import { type Context, Logger } from 'cordis'
import * as ToolsShell from '../src/index.ts'
import { probeBubblewrap } from '../src/index.ts'

Logger.levels.base = 0

// this file's deployments and temp dirs: cleanup is a root hook, so it must not stop other suites' (as disposeAll would)
const kit = scratch('faber-shell-')
export const { tempDir, cleanup } = kit

export interface Setup {
  shell?: Partial<ToolsShell.ConfigInput>
  mode?: Mode
  /** more plugins, loaded before start */
  plugins?: (ctx: Context, root: string) => void
}

export async function deployment(setup: Setup = {}) {
  const root = await tempDir()
  const ctx = await start({ mode: setup.mode ?? 'native' }, (ctx) => {
    kit.track(ctx)
    ctx.plugin(ToolsShell, { root, ...setup.shell })
    setup.plugins?.(ctx, root)
  })
  const call = (name: string, args: unknown, extra: { agent?: Agent; signal?: AbortSignal; session?: string } = {}): Promise<ToolResult> =>
    callTool(ctx, name, args, extra)
  return {
    ctx,
    root,
    call,
    bash: (command: string, extra: { timeoutMs?: number; agent?: Agent; signal?: AbortSignal } = {}) =>
      call('bash', { command, ...(extra.timeoutMs ? { timeoutMs: extra.timeoutMs } : {}) }, extra),
    file: (rel: string) => path.join(root, rel),
  }
}

// ---- bubblewrap: required in CI, skipped (never passed) elsewhere when it cannot run

let probed: { ok: true } | { ok: false; why: string } | undefined

/**
 * for a `before` hook of a suite that needs bubblewrap. where it cannot run, the suite is skipped — mocha reports
 * it as pending, never as passed — with the reason printed; with FABER_REQUIRE_BWRAP=1 (set by .ci/run) it fails.
 */
export function requireBubblewrap(context: Mocha.Context) {
  probed ??= probeBubblewrap(os.tmpdir(), '/bin/bash', {
    filesystem: 'readonly',
    network: false,
    hide: [],
    readOnly: [],
    writable: [],
    protect: [],
  })
  if (probed.ok) return
  if (process.env.FABER_REQUIRE_BWRAP === '1') throw new Error(`bubblewrap is required here (FABER_REQUIRE_BWRAP=1) but cannot run: ${probed.why}`)
  console.warn(`      bubblewrap cannot run here, so these tests are SKIPPED (not passed): ${probed.why}`)
  context.skip()
}

/** waits until a file in the workspace has at least `lines` lines, re-reading it whenever its directory changes; returns them */
export async function linesOf(file: string, lines: number, withinMs = 5000): Promise<string[]> {
  const read = async () => (await readFile(file, 'utf8').catch(() => '')).split('\n').filter(Boolean)
  let found: string[] = []
  let wake = () => {}
  // watching starts before the first read, so no write falls between them
  const watcher = watch(path.dirname(file), () => wake())
  const timer = setTimeout(() => wake(), withinMs)
  const deadline = Date.now() + withinMs
  try {
    for (;;) {
      const changed = new Promise<void>((resolve) => (wake = resolve))
      found = await read()
      if (found.length >= lines) return found
      if (Date.now() >= deadline) throw new Error(`${file} did not get ${lines} lines in ${withinMs} ms (it has ${found.length})`)
      await changed
    }
  } finally {
    clearTimeout(timer)
    watcher.close()
  }
}
