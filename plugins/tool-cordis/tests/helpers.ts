// test helpers beyond @faber/core/testing: a deployment with the inspector, and a CodeRuntime whose "program" makes
// scripted binding calls, in a fixed order, through the core's real run_code bridge (one test also runs a real
// program in @faber/sandbox)

import { existsSync } from 'node:fs'
import { type BridgeReply, type CodeRunOutcome, type CodeRunRequest, type CodeRuntime, createAgent, type Mode, type ToolResult } from '@faber/core'
import * as kit from '@faber/core/testing'
import { type Context, Logger } from 'cordis'
import { type Browser, chromium, type Page } from 'playwright-core'
import Inspector from '../src/index.ts'

Logger.levels.base = 0

/** a started deployment with the inspector loaded (unless `inspector: false`) */
export function deployment(options: { mode?: Mode; inspector?: Partial<Inspector.Config> | false } = {}) {
  return kit.deployment({ mode: options.mode ?? 'native' }, (ctx) => {
    if (options.inspector !== false) ctx.plugin(Inspector, options.inspector ?? {})
  })
}

/** the web specs' team: agent coder, presented in code mode (run_code only) */
export const team = {
  name: 'team',
  inject: ['tools'],
  Config: undefined,
  apply: (c: Context) => createAgent(c, { name: 'coder' }).ctx.tools.presentAs('code'),
}

/** a call on agent coder (code mode: run_code only), or with agent null on the global layer (native) */
export function call(ctx: Context, callId: string, name: string, args: unknown, agent: string | null = 'coder'): Promise<ToolResult> {
  return kit.call(ctx, name, args, { callId, agent: agent === null ? undefined : ctx.tools.agent(agent) })
}

/** a CodeRuntime whose program makes these binding calls in order and returns the replies */
export class ScriptedCodeRuntime implements CodeRuntime {
  readonly backend = 'scripted'

  constructor(public calls: { name: string; args: unknown }[]) {}

  async run(request: CodeRunRequest): Promise<CodeRunOutcome> {
    const replies: BridgeReply[] = []
    for (const { name, args } of this.calls) replies.push(await request.call(name, JSON.stringify(args)))
    return { ok: true, logs: [], result: JSON.stringify(replies) }
  }
}

const CHROMIUM = process.env.FABER_CHROMIUM ?? '/usr/bin/chromium'

/** Debian's Chromium, headless, on a laptop-sized page of the web view at `url`, once its live stream is connected */
export async function openPage(url: string, wait: number): Promise<{ browser: Browser; page: Page }> {
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: install Debian's (scripts/bootstrap does, as root) or set FABER_CHROMIUM`)
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] })
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } })
  await page.goto(url)
  await page.waitForSelector('#status.ok', { timeout: wait })
  return { browser, page }
}
