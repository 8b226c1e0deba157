// faber replay at scale: a log of REPLAY_CALLS recorded calls (default 100,000; one recorded turn of reads, edits, a
// write and a list, repeated) replayed through a deployment with guards, approval rules and fs-observation, against a
// plain ctx.tools.execute of the same calls (bodies running; the first REPLAY_EXECUTE of them, default 10,000, as the
// bodies write and sync files) on the same deployment in the same run.

import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AgentSession, ScriptedModel, SessionLog } from '@faber/agent'
import { compose, type DeploymentSpec, readDeployment, replay } from '@faber/cli'
import { Logger } from 'cordis'
import { isMain } from './harness.ts'

Logger.levels.base = 0

const CALLS = Number(process.env.REPLAY_CALLS ?? 100_000)
const EXECUTE = Math.min(CALLS, Number(process.env.REPLAY_EXECUTE ?? 10_000))

const TURN = [
  { name: 'read', arguments: { path: 'a.txt' } },
  { name: 'edit', arguments: { path: 'a.txt', oldString: 'one', newString: 'two' } },
  { name: 'read', arguments: { path: 'b.txt' } },
  { name: 'write', arguments: { path: 'c.txt', content: 'new\n' } },
  { name: 'list', arguments: {} },
]

function deployment(dir: string): DeploymentSpec {
  const root = join(dir, 'ws')
  return readDeployment(
    {
      agents: [{ name: 'main' }],
      plugins: {
        '@faber/plugin-tools-fs': { root },
        '@faber/plugin-fs-observation': {},
        '@faber/plugin-guards': {
          deny: [{ tools: ['bash'], argument: '$.command', pattern: '^rm ', reason: 'no rm' }],
          paths: [{ tools: ['read', 'write', 'edit', 'list'], roots: [root] }],
        },
        '@faber/plugin-approval': {
          policy: 'ask',
          require: ['write', 'edit'],
          rules: [
            { tool: 'write', decision: 'allow' },
            { tool: 'edit', decision: 'allow' },
          ],
        },
      },
    },
    'bench.yml',
    dir,
  )
}

async function workspace(dir: string) {
  await import('node:fs/promises').then(({ mkdir }) => mkdir(join(dir, 'ws'), { recursive: true }))
  await writeFile(join(dir, 'ws', 'a.txt'), 'one\n')
  await writeFile(join(dir, 'ws', 'b.txt'), 'bee\n')
}

/** records one real turn, then repeats its lines (new call ids and turn numbers) until the log holds `calls` calls */
async function makeLog(dir: string, spec: DeploymentSpec, calls: number): Promise<string> {
  const one = join(dir, 'one.jsonl')
  const deployed = await compose(spec)
  const log = await SessionLog.open(one)
  const model = new ScriptedModel([...TURN.map((call) => ({ toolCalls: [call] })), { text: 'done' }])
  const session = new AgentSession(deployed.ctx, { model, agent: deployed.agents.get('main'), log })
  await session.send('go')
  session.dispose()
  await log.close()
  await deployed.stop()
  const [head, ...turn] = (await readFile(one, 'utf8')).split('\n').filter(Boolean)
  const path = join(dir, 'big.jsonl')
  const out: string[] = [head]
  for (let n = 1; n * TURN.length <= calls; n++) {
    for (const line of turn) out.push(line.replaceAll('"turn":1', `"turn":${n}`).replaceAll('call_1_0', `call_${n}`))
  }
  await writeFile(path, `${out.join('\n')}\n`)
  return path
}

export async function benchReplay() {
  const dir = await mkdtemp(join(tmpdir(), 'faber-bench-replay-'))
  try {
    await workspace(dir)
    const spec = deployment(dir)
    const log = await makeLog(dir, spec, CALLS)
    const size = (await stat(log)).size

    // baseline: the same calls through ctx.tools.execute, bodies running, on the same deployment
    const deployed = await compose(spec)
    const agent = deployed.agents.get('main')
    const signal = new AbortController().signal
    const tools = deployed.ctx.tools
    const rounds = Math.floor(EXECUTE / TURN.length)
    const cpu = () => {
      const { user, system } = process.cpuUsage()
      return (user + system) / 1000
    }
    let started = performance.now()
    let cpuStarted = cpu()
    for (let n = 0; n < rounds; n++) {
      for (const [i, call] of TURN.entries()) await tools.execute({ callId: `c${n}_${i}`, name: call.name, arguments: call.arguments, signal, agent })
    }
    const executeMs = performance.now() - started
    const executeCpuMs = cpu() - cpuStarted
    await deployed.stop()

    started = performance.now()
    cpuStarted = cpu()
    const report = await replay([log], spec)
    const replayMs = performance.now() - started
    const replayCpuMs = cpu() - cpuStarted
    const perSecond = (calls: number, ms: number) => Math.round((calls * 1000) / ms)
    const executed = rounds * TURN.length
    console.log(`  ${report.summary.replayed} calls, ${(size / 1e6).toFixed(1)} MB of log, guards + approval rules + fs-observation loaded`)
    // the process's CPU time too: on a shared machine the wall clock also counts others' work
    console.log(
      `  plain execute (bodies run)          ${perSecond(executed, executeMs).toLocaleString('en').padStart(9)} calls/s   ${(executeMs / 1000).toFixed(2)} s   CPU ${(executeCpuMs / 1000).toFixed(2)} s`,
    )
    const ratio = replayMs / report.summary.replayed / (executeMs / executed)
    console.log(
      `  faber replay (read, parse, replay)  ${perSecond(report.summary.replayed, replayMs).toLocaleString('en').padStart(9)} calls/s   ${(replayMs / 1000).toFixed(2)} s   ${ratio.toFixed(2)}× execute's time a call   CPU ${(replayCpuMs / 1000).toFixed(2)} s`,
    )
    console.log(`  changed: ${report.summary.changed}`)
    return {
      calls: report.summary.replayed,
      logBytes: size,
      executeMs,
      executeCpuMs,
      replayMs,
      replayCpuMs,
      replayPerSecond: perSecond(report.summary.replayed, replayMs),
    }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

if (isMain(import.meta.url)) await benchReplay()
