// the web view under load: a 5 000-call program and a thousand calls at once, with no view, with a view and a page
// reading its stream, and with a view and a page that stopped reading (its backlog is bounded). prints wall time
// ratios to the run without a view, and the host's heap growth. run: pnpm exec tsx bench/web-view-load.ts

import { request } from 'node:http'
import { connect } from 'node:net'
import ToolRuntime, { assertStarted, createAgent, defineTool, t } from '@faber/core'
import Inspector from '@faber/plugin-tool-cordis'
import WorkerSandbox from '@faber/sandbox'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0

async function deployment() {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  ctx.plugin(WorkerSandbox, { poolSize: 1 })
  ctx.plugin({ name: 'team', inject: ['tools'], Config: undefined, apply: (c: Context) => createAgent(c, { name: 'coder' }).ctx.tools.presentAs('code') })
  ctx.plugin(Inspector)
  await ctx.start()
  await assertStarted(ctx)
  ctx.tools.register(
    defineTool({
      name: 'noop',
      description: 'nothing',
      parameters: t.object({ path: t.string() }),
      output: { schema: t.string() },
      execute: ({ path }) => path.slice(0, 3),
      isConcurrencySafe: () => true,
    }),
  )
  return ctx
}

const signal = new AbortController().signal
const PROGRAM = 'for (let i = 0; i < 5000; i++) await tools.noop({ path: String(i) })\nreturn 1'

async function work(ctx: Context) {
  const started = performance.now()
  // the event loop's worst stall while the work runs
  let worst = 0
  let last = performance.now()
  const probe = setInterval(() => {
    const now = performance.now()
    worst = Math.max(worst, now - last - 5)
    last = now
  }, 5)
  const result = await ctx.tools.execute({
    callId: 'p',
    name: 'run_code',
    arguments: { code: PROGRAM, description: 'bench' },
    signal,
    agent: ctx.tools.agent('coder'),
  })
  if (result.isError) throw new Error(result.content)
  const program = performance.now() - started
  const burstAt = performance.now()
  await Promise.all(
    Array.from({ length: 1000 }, (_, i) => ctx.tools.execute({ callId: `b${i}`, name: 'noop', arguments: { path: 'y'.repeat(10_000) }, signal })),
  )
  const burst = performance.now() - burstAt
  clearInterval(probe)
  return { program, burst, worst }
}

async function scenario(kind: 'none' | 'reading' | 'stalled') {
  const ctx = await deployment()
  let stop = () => {}
  if (kind !== 'none') {
    const view = await ctx.inspector.serve()
    if (kind === 'reading') {
      const req = request(`http://127.0.0.1:${view.port}/api/events`, (res) => res.resume())
      req.end()
      stop = () => req.destroy()
    } else {
      const socket = connect(view.port, '127.0.0.1')
      socket.write(`GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:${view.port}\r\n\r\n`)
      socket.pause()
      stop = () => socket.destroy()
    }
  }
  global.gc?.()
  const heapBefore = process.memoryUsage().heapUsed
  const timing = await work(ctx)
  const heapAfter = process.memoryUsage().heapUsed
  stop()
  await ctx.stop()
  return { ...timing, heapMb: (heapAfter - heapBefore) / 1e6 }
}

await scenario('none') // warm-up
const none = await scenario('none')
for (const kind of (process.env.ONLY ? [process.env.ONLY] : ['none', 'reading', 'stalled']) as ('none' | 'reading' | 'stalled')[]) {
  const r = kind === 'none' ? none : await scenario(kind)
  console.log(
    `${kind.padEnd(8)} 5000-call program ${r.program.toFixed(0)} ms (x${(r.program / none.program).toFixed(2)}), 1000 calls at once ${r.burst.toFixed(0)} ms (x${(r.burst / none.burst).toFixed(2)}), worst event-loop stall ${r.worst.toFixed(1)} ms, heap +${r.heapMb.toFixed(1)} MB`,
  )
}
process.exit(0)
