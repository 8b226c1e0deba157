// the agent loop's own cost: a turn of N concurrency-safe tool calls through AgentSession (prompt assembly, the
// scheduler, messages, events) against the same N calls made with ctx.tools.execute directly; and OpenAIChatModel's
// SSE reading against JSON.parse of the same chunks.

import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AgentSession, OpenAIChatModel, ScriptedModel, SessionLog } from '@faber/agent'
import ToolRuntime, { defineTool, t } from '@faber/core'
import { Context, Logger } from 'cordis'
import { isMain, row, timeOp } from './harness.ts'

const CALLS = 50

export async function benchAgentLoop() {
  Logger.levels.base = 0
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  await ctx.start()
  ctx.tools.register(
    defineTool({
      name: 'noop',
      description: 'returns its argument',
      parameters: t.object({ n: t.number() }),
      output: { schema: t.number() },
      execute: ({ n }) => n,
      isConcurrencySafe: () => true,
    }),
  )
  const calls = Array.from({ length: CALLS }, (_, n) => ({ name: 'noop', arguments: { n } }))
  const signal = new AbortController().signal
  const direct = await timeOp(() => Promise.all(calls.map((c, i) => ctx.tools.execute({ callId: `c${i}`, name: c.name, arguments: c.arguments, signal }))), 50)
  const turn = async () => {
    const session = new AgentSession(ctx, { model: new ScriptedModel([{ toolCalls: calls }, { text: 'done' }]) })
    await session.send('go')
    session.dispose()
  }
  const loop = await timeOp(turn, 50)
  const dir = await mkdtemp(join(tmpdir(), 'faber-bench-'))
  const logged = await timeOp(async () => {
    const log = await SessionLog.open(join(dir, `s${Math.random()}.jsonl`))
    const session = new AgentSession(ctx, { model: new ScriptedModel([{ toolCalls: calls }, { text: 'done' }]), log })
    await session.send('go')
    session.dispose()
    await log.close()
  }, 20)
  await rm(dir, { recursive: true, force: true })
  await ctx.stop()
  console.log(`  a turn of ${CALLS} parallel calls (two model calls), per turn:`)
  row(`${CALLS} calls with ctx.tools.execute (baseline)`, direct, direct)
  row('the same through AgentSession', loop, direct)
  row('the same with a JSONL session log (2 fsyncs)', logged, direct)
  return { directUs: direct, loopUs: loop, loggedUs: logged, perCallOverheadUs: (loop - direct) / CALLS }
}

export async function benchSseReading() {
  const chunks = Array.from({ length: 2000 }, (_, i) =>
    JSON.stringify({
      choices: [
        {
          index: 0,
          delta: i % 10 ? { content: `token${i} ` } : { tool_calls: [{ index: 0, id: 'c0', function: { name: 'f', arguments: `{"k${i}":1,` } }] },
          finish_reason: null,
        },
      ],
    }),
  )
  const body = `${chunks.map((c) => `data: ${c}\n\n`).join('')}data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\ndata: [DONE]\n\n`
  const bytes = new TextEncoder().encode(body)
  const fakeFetch = (async () =>
    new Response(
      new ReadableStream({
        start(controller) {
          for (let i = 0; i < bytes.length; i += 4096) controller.enqueue(bytes.subarray(i, i + 4096))
          controller.close()
        },
      }),
      { headers: { 'content-type': 'text/event-stream' } },
    )) as unknown as typeof fetch
  const model = new OpenAIChatModel({ baseURL: 'http://bench.invalid/v1', model: 'bench', fetch: fakeFetch })
  const signal = new AbortController().signal
  const parse = await timeOp(() => {
    for (const c of chunks) JSON.parse(c)
  }, 20)
  const read = await timeOp(() => model.complete({ messages: [{ role: 'user', content: 'x' }], tools: [], signal }), 20)
  console.log(`  a streamed answer of ${chunks.length} chunks (${(bytes.length / 1024).toFixed(0)} KiB):`)
  row('JSON.parse of every chunk (baseline)', parse, parse)
  row('OpenAIChatModel reading the SSE stream', read, parse)
  return { parseUs: parse, readUs: read }
}

if (isMain(import.meta.url)) {
  await benchAgentLoop()
  await benchSseReading()
}
