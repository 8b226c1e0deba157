// per-call cost of the policy plugins on ctx.tools.execute for a trivial tool, against the bare core in the same run.

import { mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import ToolRuntime, { defineTool, t } from '@faber/core'
import Approval from '@faber/plugin-approval'
import * as Guards from '@faber/plugin-guards'
import { Context, Logger } from 'cordis'
import { isMain, row, timeOp } from './harness.ts'

Logger.levels.base = 0

const ITERATIONS = 10000

async function deployment(install: (ctx: Context) => void) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  install(ctx)
  await ctx.start()
  ctx.tools.register(
    defineTool({
      name: 'add',
      description: 'adds two numbers',
      parameters: t.object({ a: t.number(), b: t.number(), path: t.string() }),
      output: { schema: t.number() },
      execute: ({ a, b }) => a + b,
    }),
  )
  return ctx
}

export async function benchGuards() {
  const root = await mkdtemp(`${tmpdir()}/faber-bench-`)
  const signal = new AbortController().signal
  let i = 0
  // arguments vary so the breaker never blocks: each call is measured on its full path
  // hold the service: reading ctx.tools builds a traced proxy each time (see bench/pipeline.ts)
  const op = (ctx: Context) => {
    const tools = ctx.tools
    return () => tools.execute({ callId: 'c', name: 'add', arguments: { a: i++, b: 2, path: 'src/a.ts' }, signal })
  }

  const rules = {
    deny: [
      { name: 'names', tools: ['fs_*', '*delete*'], reason: 'no' },
      { name: 'rm', tools: ['add'], argument: '$.path', pattern: '\\.env$', reason: 'no' },
    ],
    rateLimits: [{ tools: ['add'], perMinute: 1_000_000 }],
    timeout: { defaultMs: 60_000 },
  }
  const cases: [string, Context][] = [
    ['bare core', await deployment(() => {})],
    ['guards: rules, breaker, rate limit, timeout', await deployment((ctx) => ctx.plugin(Guards, rules))],
    ['guards: + a path rule (realpath per call)', await deployment((ctx) => ctx.plugin(Guards, { ...rules, paths: [{ tools: ['add'], roots: [root] }] }))],
    ['approval: ask, answered by a rule', await deployment((ctx) => ctx.plugin(Approval, { require: ['add'], rules: [{ tool: 'add', decision: 'allow' }] }))],
  ]
  const figures: Record<string, number> = {}
  let baseline = 0
  console.log(`  per call, best of 5 rounds of ${ITERATIONS}`)
  for (const [label, ctx] of cases) {
    const micros = await timeOp(op(ctx), ITERATIONS)
    baseline ||= micros
    figures[label] = micros
    row(label, micros, baseline)
    await ctx.stop()
  }
  return figures
}

if (isMain(import.meta.url)) await benchGuards()
