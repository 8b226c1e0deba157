// what a checkpoint and a resume by replay cost, against a program's first run: a program of N sequential nested calls
// (5, 50, 500), then a call that waits on a person. with checkpointAfterMs 1 the program is checkpointed as soon as it
// waits; the person answers once it is. "checkpoint": from the person being asked to the sandbox unit given back
// (the 1 ms threshold and a timer's lateness included); "resume": from the answer to run_code's result, the N calls
// answered from the journal and the waited call's body run. the baseline is the same N calls run live, then a return.

import { copyFile, mkdtemp, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AgentSession, ScriptedModel, SessionLog } from '@faber/agent'
import { defineTool, t, waitOnPerson } from '@faber/core'
import { call, deployment } from '@faber/core/testing'
import Approval, { type ApprovalQuery } from '@faber/plugin-approval'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import type { Context } from 'cordis'
import { isMain, median, nopTool } from './harness.ts'

const SIZES = [5, 50, 500]
const ROUNDS = Number(process.env.CHECKPOINT_ROUNDS ?? 7)

interface Asked {
  at: number
  answer(): void
}

async function setup(Sandbox: typeof WorkerSandboxService | typeof IsolateSandboxService, answer: 'person' | 'at once' = 'person') {
  const asked: Asked[] = []
  let onAsk: (() => void) | undefined
  const ctx = await deployment({ mode: 'code', checkpointAfterMs: 1, codeLimits: { cpuMs: 60_000, wallMs: 60_000 } }, (ctx) => {
    ctx.plugin(Sandbox, { isolation: 'in-process', poolSize: 1 })
    ctx.plugin(Approval, { require: ['deploy'] })
    ctx.plugin({
      name: 'person',
      apply: (ctx: Context) =>
        ctx.on('approval/request', (query: ApprovalQuery) => {
          if (answer === 'at once') return { decision: 'allow' }
          const answered = waitOnPerson(query.exec)
          return new Promise((resolve) => {
            asked.push({
              at: performance.now(),
              answer: () => {
                answered()
                resolve({ decision: 'allow' })
              },
            })
            onAsk?.()
          })
        }),
    })
  })
  ctx.tools.register(nopTool('nop', 'does nothing'))
  ctx.tools.register(
    defineTool({ name: 'deploy', description: 'deploys', parameters: t.object({}), output: { schema: t.string() }, execute: () => 'deployed' }),
  )
  await (ctx.get('codeRuntime') as unknown as { ready(): Promise<void> }).ready()
  const asking = () => new Promise<void>((resolve) => (onAsk = resolve))
  return { ctx, asked, asking }
}

const program = (n: number, tail: string) => `for (let i = 0; i < ${n}; i++) await tools.nop({ i })\n${tail}`
const run = (ctx: Context, code: string) => call(ctx, 'run_code', { code, description: 'bench' })
const turn = () => new Promise((resolve) => setImmediate(resolve))

async function measure(ctx: Context, asked: Asked[], asking: () => Promise<void>, n: number) {
  const first: number[] = []
  const checkpoint: number[] = []
  const resume: number[] = []
  for (let round = 0; round < ROUNDS; round++) {
    let start = performance.now()
    const plain = await run(ctx, program(n, 'return 1'))
    if (plain.isError) throw new Error(plain.content)
    first.push(performance.now() - start)

    const waiting = asking()
    const result = run(ctx, program(n, 'return await tools.deploy({})'))
    await waiting
    const ask = asked.shift()!
    while (ctx.tools.waitingPrograms().checkpointed === 0) await turn()
    checkpoint.push(performance.now() - ask.at)
    start = performance.now()
    ask.answer()
    const resumed = await result
    if (resumed.isError || !resumed.content.includes('deployed')) throw new Error(resumed.content)
    resume.push(performance.now() - start)
  }
  return { first: median(first), checkpoint: median(checkpoint), resume: median(resume) }
}

export async function benchCheckpoint() {
  const figures: Record<string, Record<number, { first: number; checkpoint: number; resume: number }>> = {}
  for (const [backend, Sandbox] of [
    ['worker', WorkerSandboxService],
    ['isolate', IsolateSandboxService],
  ] as const) {
    const { ctx, asked, asking } = await setup(Sandbox)
    figures[backend] = {}
    console.log(`  ${backend} (in-process), medians of ${ROUNDS}:`)
    for (const n of SIZES) {
      const f = await measure(ctx, asked, asking, n)
      figures[backend][n] = f
      const ms = (x: number) => `${x.toFixed(2)} ms`
      console.log(
        `    ${String(n).padStart(3)} calls: first run ${ms(f.first).padStart(10)}   checkpoint ${ms(f.checkpoint).padStart(9)} (${(f.checkpoint / f.first).toFixed(2)}×)   resume ${ms(f.resume).padStart(9)} (${(f.resume / f.first).toFixed(2)}×)`,
      )
    }
    await ctx.stop()
  }
  return figures
}

/**
 * the same programs with the checkpoint made durable and resumed by a new session after a "restart": a session log
 * (a file in the temp dir) records the journal. "durable checkpoint": from the person being asked to the checkpoint
 * record written and fsynced; "restart resume": from opening the log (as it stood at the checkpoint, copied) in
 * another deployment — its parse, the session rebuilt — to run_code's result there, its N calls answered from the
 * log and the waited call's body run. the model's turns are scripted
 */
export async function benchCheckpointRestart() {
  const figures: Record<string, Record<number, { first: number; durable: number; restart: number; logKb: number }>> = {}
  const dir = await mkdtemp(join(tmpdir(), 'faber-bench-checkpoint-'))
  try {
    for (const [backend, Sandbox] of [
      ['worker', WorkerSandboxService],
      ['isolate', IsolateSandboxService],
    ] as const) {
      const first = await setup(Sandbox)
      const second = await setup(Sandbox, 'at once')
      figures[backend] = {}
      console.log(`  ${backend} (in-process), durable, medians of ${ROUNDS}:`)
      for (const n of SIZES) {
        const plain: number[] = []
        const durable: number[] = []
        const restart: number[] = []
        let logBytes = 0
        for (let round = 0; round < ROUNDS; round++) {
          let start = performance.now()
          const baseline = await run(first.ctx, program(n, 'return 1'))
          if (baseline.isError) throw new Error(baseline.content)
          plain.push(performance.now() - start)

          const live = join(dir, `live-${backend}-${n}-${round}.jsonl`)
          const log = await SessionLog.open(live)
          const code = program(n, 'return await tools.deploy({})')
          const model = new ScriptedModel([{ toolCalls: [{ id: 'run1', name: 'run_code', arguments: { code, description: 'bench' } }] }, { text: 'done' }])
          const session = new AgentSession(first.ctx, { model, log })
          let onDisk!: () => void
          const written = new Promise<void>((resolve) => (onDisk = resolve))
          // heard after the session's own listener: its flush resolves once the checkpoint record is written and synced
          const unlisten = first.ctx.on('code/journal', ({ change }) => {
            if (change.kind === 'checkpoint') log.flush().then(onDisk)
          })
          const stop = new AbortController()
          const waiting = first.asking()
          const turn = session.send('go', { signal: stop.signal })
          await waiting
          const ask = first.asked.shift()!
          await written
          durable.push(performance.now() - ask.at)
          unlisten()
          const crashed = join(dir, `crashed-${backend}-${n}-${round}.jsonl`)
          await copyFile(live, crashed)
          logBytes = (await stat(crashed)).size
          stop.abort()
          await turn
          ask.answer()
          await log.close()

          start = performance.now()
          const reopened = await SessionLog.open(crashed)
          const resumed = new AgentSession(second.ctx, { model: new ScriptedModel([{ text: 'done' }]), log: reopened })
          await resumed.resume()
          restart.push(performance.now() - start)
          const result = resumed.messages.find((m) => m.role === 'tool')
          if (!result?.content.includes('deployed')) throw new Error(`the restart did not resume the program: ${result?.content}`)
          resumed.dispose()
          session.dispose()
          await reopened.close()
        }
        const f = { first: median(plain), durable: median(durable), restart: median(restart), logKb: logBytes / 1024 }
        figures[backend][n] = f
        const ms = (x: number) => `${x.toFixed(2)} ms`
        console.log(
          `    ${String(n).padStart(3)} calls: first run ${ms(f.first).padStart(10)}   durable checkpoint ${ms(f.durable).padStart(9)} (${(f.durable / f.first).toFixed(2)}×)   restart resume ${ms(f.restart).padStart(9)} (${(f.restart / f.first).toFixed(2)}×)   log ${f.logKb.toFixed(1)} KB`,
        )
      }
      await first.ctx.stop()
      await second.ctx.stop()
    }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
  return figures
}

/**
 * CHECKPOINT_WAITING programs (default 1,000) started at once, each waiting on a person after one call: how long until
 * all are checkpointed, what the host's heap and rss grew by meanwhile, how late its event loop ran (a timer's delay,
 * p99 and max), and how long until all are answered and done. maxConcurrent is the sandbox's default
 */
export async function benchCheckpointWaiting() {
  const count = Number(process.env.CHECKPOINT_WAITING ?? 1000)
  const { monitorEventLoopDelay } = await import('node:perf_hooks')
  const figures: Record<string, unknown> = {}
  for (const [backend, Sandbox] of [
    ['worker', WorkerSandboxService],
    ['isolate', IsolateSandboxService],
  ] as const) {
    const { ctx, asked } = await setup(Sandbox)
    await run(ctx, program(1, 'return 1'))
    const before = process.memoryUsage()
    const delay = monitorEventLoopDelay({ resolution: 10 })
    delay.enable()
    let start = performance.now()
    const results = Array.from({ length: count }, () => run(ctx, program(1, 'return await tools.deploy({})')))
    while (ctx.tools.waitingPrograms().checkpointed < count) await new Promise((resolve) => setTimeout(resolve, 20))
    const waitingMs = performance.now() - start
    const during = process.memoryUsage()
    delay.disable()
    start = performance.now()
    for (const ask of asked.splice(0)) ask.answer()
    const done = await Promise.all(results)
    const answeredMs = performance.now() - start
    const failed = done.filter((result) => result.isError || !result.content.includes('deployed')).length
    const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`
    const ms = (ns: number) => `${(ns / 1e6).toFixed(1)} ms`
    console.log(
      `  ${backend}: ${count} checkpointed in ${(waitingMs / 1000).toFixed(2)} s; heap +${mb(during.heapUsed - before.heapUsed)}, rss +${mb(during.rss - before.rss)}; event-loop delay p99 ${ms(delay.percentile(99))}, max ${ms(delay.max)}; all answered and done in ${(answeredMs / 1000).toFixed(2)} s, ${failed} failed`,
    )
    figures[backend] = {
      count,
      waitingMs,
      heapMb: (during.heapUsed - before.heapUsed) / 2 ** 20,
      rssMb: (during.rss - before.rss) / 2 ** 20,
      p99Ms: delay.percentile(99) / 1e6,
      maxMs: delay.max / 1e6,
      answeredMs,
      failed,
    }
    await ctx.stop()
  }
  return figures
}

if (isMain(import.meta.url)) {
  await benchCheckpoint()
  await benchCheckpointRestart()
  await benchCheckpointWaiting()
  process.exit()
}
