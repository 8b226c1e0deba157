// a program checkpointed while it waits on a person is written to the session log, so a new process continuing the
// session runs it again from there: the calls it made are answered from the log (their bodies do not run again), the
// call it waited on is asked again, and the model's turn goes on with its result. a crash is the log file as it stood
// on disk at that moment, copied, and opened by a fresh deployment (the real restart of `faber` is in cli's resume spec)

import { copyFileSync, existsSync } from 'node:fs'
import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AgentSession, type LogRecord, ScriptedModel, type ScriptedTurn, SessionLog } from '@faber/agent'
import { defineTool, type Json, t } from '@faber/core'
import { deployment, disposeAll } from '@faber/core/testing'
import Approval from '@faber/plugin-approval'
import WorkerSandboxService from '@faber/sandbox'
import IsolateSandboxService from '@faber/sandbox-isolate'
import DeploymentStore from '@faber/store'
import { expect } from 'chai'
import type { Context } from 'cordis'
import { never, person } from './fixtures/waiting-person.ts'

const backends = [
  ['worker', WorkerSandboxService],
  ['isolate', IsolateSandboxService],
] as const

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
async function until(check: () => boolean | Promise<boolean>) {
  while (!(await check())) await sleep(10)
}

const records = async (path: string): Promise<LogRecord[]> =>
  (await readFile(path, 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line))

/**
 * `answer`: what the person says when asked (`never`: they have not answered when the process stops; `late`: allow,
 * once the program is checkpointed, and its deploy body then runs until the call is aborted)
 */
async function deploy(
  Sandbox: (typeof backends)[number][1],
  answer: 'never' | 'allow' | 'late',
  extra: string[] = [],
  store?: string,
  /** for `late`: what the person waits for besides the checkpoint */
  late: () => Promise<boolean> = async () => true,
) {
  const bodies: string[] = []
  const ctx = await deployment({ mode: 'code', checkpointAfterMs: 100, codeLimits: { cpuMs: 500 } }, (ctx) => {
    ctx.plugin(Sandbox, { poolSize: 1 })
    if (store) ctx.plugin(DeploymentStore, { path: store })
    ctx.plugin(Approval, { require: ['deploy'], ...(store ? { grantWatchMs: 20, timeoutMs: 3000 } : {}) })
    ctx.plugin({
      name: 'person',
      inject: ['tools'],
      apply: (ctx: Context) =>
        answer === 'allow'
          ? ctx.on('approval/request', () => ({ decision: 'allow' as const }))
          : person(ctx, async (query) => {
              if (answer !== 'late') return never(query)
              while (ctx.tools.waitingPrograms().checkpointed === 0 || !(await late())) await sleep(10)
              return { decision: 'allow' as const }
            }),
    })
  })
  const tool = (name: string, execute: (args: { n?: number }) => Json) =>
    ctx.tools.register(
      defineTool({
        name,
        description: name,
        parameters: t.object({ n: t.number().optional(), r: t.number().optional() }),
        output: { schema: t.unknown() },
        execute: (args) => {
          bodies.push(name)
          return execute(args)
        },
      }),
    )
  tool('count', ({ n = 0 }) => n * 10)
  if (answer === 'late') {
    ctx.tools.register(
      defineTool({
        name: 'deploy',
        description: 'deploy',
        parameters: t.object({}),
        output: { schema: t.string() },
        execute: (_, { signal }) => {
          bodies.push('deploy')
          return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)))
        },
      }),
    )
  } else tool('deploy', () => 'deployed')
  for (const name of extra) tool(name, () => null)
  await (ctx.get('codeRuntime') as { ready?(): Promise<void> }).ready?.()
  return { ctx, bodies }
}

const PROGRAM = [
  'const r = Math.random()',
  'const a = await tools.count({ n: 1, r })',
  'const b = await tools.deploy({})',
  'const c = await tools.count({ n: 2 })',
  'return [a, b, c, r < 1]',
].join('\n')

const runCode = (code: string): ScriptedTurn => ({ toolCalls: [{ id: 'run1', name: 'run_code', arguments: { code, description: 'deploys' } }] })

/**
 * the first process: its model's program is checkpointed while the person has not answered, and the process stops.
 * resolves with the log file as it stood then
 */
async function firstProcess(dir: string, Sandbox: (typeof backends)[number][1], code = PROGRAM, stopping: 'waiting' | 'in the body' = 'waiting') {
  const { ctx, bodies } = await deploy(Sandbox, stopping === 'waiting' ? 'never' : 'late')
  const path = join(dir, 'live.jsonl')
  const log = await SessionLog.open(path)
  const session = new AgentSession(ctx, { model: new ScriptedModel([runCode(code), { text: 'not reached' }]), log })
  const stop = new AbortController()
  const turn = session.send('deploy it', { signal: stop.signal })
  if (stopping === 'waiting') {
    await until(async () => ctx.tools.waitingPrograms().checkpointed === 1 && (await readFile(path, 'utf8')).includes('"type":"checkpoint"'))
  } else await until(() => bodies.includes('deploy'))
  const crashed = join(dir, 'session.jsonl')
  await copyFile(path, crashed)
  expect(bodies, 'the first process ran the call before the wait').to.deep.equal(stopping === 'waiting' ? ['count'] : ['count', 'deploy'])
  stop.abort()
  await turn
  await log.close()
  return crashed
}

/** the process after the restart: a fresh deployment continuing the session from the log */
async function secondProcess(path: string, Sandbox: (typeof backends)[number][1], extra: string[] = [], script?: ScriptedTurn[], store?: string) {
  const { ctx, bodies } = await deploy(Sandbox, store ? 'never' : 'allow', extra, store)
  const log = await SessionLog.open(path)
  const model = new ScriptedModel(script ?? [(view) => ({ text: `the program said: ${view.results[0]?.content}` })])
  const session = new AgentSession(ctx, { model, log })
  return { ctx, bodies, log, session }
}

for (const [backend, Sandbox] of backends) {
  describe(`a checkpointed program survives a restart: ${backend}`, function () {
    this.timeout(60_000)
    let dir: string
    beforeEach(async () => {
      dir = await mkdtemp(join(tmpdir(), 'faber-durable-'))
    })
    afterEach(async () => {
      await disposeAll()
      await rm(dir, { recursive: true, force: true })
    })

    it('is written to the session log: each call with its result, the values it read, the call it waits on', async () => {
      const path = await firstProcess(dir, Sandbox)
      const checkpoint = (await records(path)).find((r) => r.type === 'checkpoint') as Extract<LogRecord, { type: 'checkpoint' }>
      expect(checkpoint).to.include({ outerCallId: 'run1', turn: 1 })
      expect(checkpoint.calls.map((c) => [c.name, c.reply])).to.deep.equal([
        ['count', { ok: true, value: '10' }],
        ['deploy', undefined],
      ])
      expect(JSON.parse(checkpoint.calls[0].arguments)).to.deep.equal({ n: 1, r: checkpoint.values[0] })
      expect(checkpoint.values).to.have.length(1)
    })

    it('runs again in a new process from the log: no body it ran runs twice, and the model goes on with its result', async () => {
      const path = await firstProcess(dir, Sandbox)
      const { bodies, log, session } = await secondProcess(path, Sandbox)
      expect(session.checkpointed).to.deep.equal(['run1'])
      const outcome = await session.resume()
      expect(outcome).to.include({ turn: 1, reason: 'done', text: 'the program said: [10,"deployed",20,true]' })
      expect(bodies, 'the count before the wait was answered from the log').to.deep.equal(['deploy', 'count'])
      await log.close()
      const after = await records(path)
      expect(after.filter((r) => r.type === 'result' && r.callId === 'run1')).to.have.length(1)
      // what the second run did live was recorded too: a third process would find nothing left to run
      expect((await records(path)).some((r) => r.type === 'journal' && r.reply?.ok)).to.equal(true)
      const third = await secondProcess(path, Sandbox)
      expect(third.session.checkpointed).to.deep.equal([])
      await third.log.close()
    })

    it('runs again before the next user turn when the session goes on with send()', async () => {
      const path = await firstProcess(dir, Sandbox)
      const { bodies, log, session } = await secondProcess(path, Sandbox, [], [{ text: 'resumed' }, { text: 'next turn' }])
      expect(await session.send('and now?')).to.include({ turn: 2, text: 'next turn' })
      await log.close()
      expect(bodies).to.deep.equal(['deploy', 'count'])
      const tool = session.messages.find((m) => m.role === 'tool')
      expect(tool?.content).to.equal('[10,"deployed",20,true]')
    })

    it('a log cut off in the middle of its checkpoint: the program is not run again, it is answered as interrupted, nothing recorded is lost', async () => {
      const path = await firstProcess(dir, Sandbox)
      const text = await readFile(path, 'utf8')
      const at = text.indexOf('{"type":"checkpoint"')
      await writeFile(path, text.slice(0, at + 40))
      const { bodies, log, session } = await secondProcess(path, Sandbox)
      expect(log.truncated?.text).to.match(/^\{"type":"checkpoint"/)
      expect(session.checkpointed).to.deep.equal([])
      const interrupted = session.messages.find((m) => m.role === 'tool')
      expect(interrupted?.content).to.match(/the session stopped before the result of "run_code" was recorded; it may or may not have run/)
      await log.close()
      expect(bodies).to.deep.equal([])
      const kept = await records(path)
      expect(kept.filter((r) => r.type === 'nested-result' && r.name === 'count')).to.have.length(1)
    })

    it('a crash while the call it waited on runs, once answered: the program is not run again, and the model is told what may have run', async () => {
      // the person answered after the checkpoint, the program ran again and the deploy body started: the log as it was
      // on disk then holds the body's start mark (synced before the body ran) and no result
      const path = await firstProcess(dir, Sandbox, PROGRAM, 'in the body')
      const started = (await records(path)).filter((r) => r.type === 'journal' && r.started)
      expect(started).to.have.length(1)
      const { bodies, log, session } = await secondProcess(path, Sandbox)
      const outcome = await session.resume()
      await log.close()
      expect(bodies).to.deep.equal([])
      expect(outcome?.text).to.match(
        /^the program said: Error: run_code failed \(interrupted\): the session stopped while tools\.deploy\(\{\}\) was running, after it was let through; it may or may not have run, so the program was not run again/,
      )
    })

    it('a checkpoint edited into something else: the program is not run again, and the model is told why', async () => {
      const path = await firstProcess(dir, Sandbox)
      const text = await readFile(path, 'utf8')
      await writeFile(path, text.replace('"reply":{"ok":true,"value":"10"}', '"reply":{"ok":"yes"}'))
      const { bodies, log, session } = await secondProcess(path, Sandbox)
      const outcome = await session.resume()
      await log.close()
      expect(outcome?.text).to.match(
        /run_code failed \(crash\): the journal recorded for this program before a restart could not be read \(call 1 of the checkpoint has a reply that is not .*\); nothing of it ran again/,
      )
      expect(bodies).to.deep.equal([])
    })

    it('a crash after the person answered, before the body ran: the answer kept in the store is not lost, the body runs once', async () => {
      const store = join(dir, 'faber.db')
      const path = join(dir, 'live.jsonl')
      // the person answers once the checkpoint is on disk (a crash before that leaves the program interrupted)
      const { ctx, bodies } = await deploy(Sandbox, 'late', [], store, async () => (await readFile(path, 'utf8')).includes('"type":"checkpoint"'))
      const log = await SessionLog.open(path)
      const session = new AgentSession(ctx, { model: new ScriptedModel([runCode(PROGRAM), { text: 'not reached' }]), log })
      // the crash: the log and the store as they are on disk the moment the answer is decided, before the body may run
      const crashed = { log: join(dir, 'session.jsonl'), store: join(dir, 'crashed.db') }
      ctx.on('approval/decided', () => {
        copyFileSync(path, crashed.log)
        copyFileSync(store, crashed.store)
        if (existsSync(`${store}-wal`)) copyFileSync(`${store}-wal`, `${crashed.store}-wal`)
      })
      const stop = new AbortController()
      const turn = session.send('deploy it', { signal: stop.signal })
      await until(() => bodies.includes('deploy'))
      stop.abort()
      await turn
      await log.close()
      // after the restart nobody answers: the answer given before it is the one that counts
      const second = await secondProcess(crashed.log, Sandbox, [], undefined, crashed.store)
      const outcome = await second.session.resume()
      await second.log.close()
      expect(outcome?.text).to.equal('the program said: [10,"deployed",20,true]')
      expect(second.bodies).to.deep.equal(['deploy', 'count'])
      const decided = (await records(crashed.log)).flatMap((r) => (r.type === 'approval' && r.event === 'approval/decided' ? [r.detail] : []))
      expect(decided.at(-1)).to.include({ outcome: 'allowed', answeredBy: 'approval-store' })
    })

    it('takes another path after the restart: stopped before any new call, nothing run twice', async () => {
      const path = await firstProcess(
        dir,
        Sandbox,
        "const a = await tools.count({ n: (await tools.$search('zebra')).length })\nreturn [a, await tools.deploy({})]",
      )
      const { bodies, log, session } = await secondProcess(path, Sandbox, ['zebra'])
      const outcome = await session.resume()
      await log.close()
      expect(outcome?.text).to.match(
        /run_code failed \(diverged\): the program took another path .* its call 1 was tools\.count\(\{"n":0\}\) the first time and tools\.count\(\{"n":1\}\) now/,
      )
      expect(bodies).to.deep.equal([])
    })

    it('killed again while the resumed program runs the call it waited on: a third process does not run it again', async () => {
      const path = await firstProcess(dir, Sandbox)
      // the second process: asked again, the person answers once it is checkpointed again, and the deploy body hangs
      const { ctx, bodies } = await deploy(Sandbox, 'late')
      const log = await SessionLog.open(path)
      const session = new AgentSession(ctx, { model: new ScriptedModel([{ text: 'not reached' }]), log })
      const stop = new AbortController()
      const resumed = session.resume({ signal: stop.signal })
      await until(() => bodies.includes('deploy'))
      const crashed = join(dir, 'again.jsonl')
      await copyFile(path, crashed)
      stop.abort()
      await resumed
      await log.close()
      expect(bodies, 'the count was answered from the log').to.deep.equal(['deploy'])
      expect(
        (await records(crashed)).filter((r) => r.type === 'checkpoint'),
        'checkpointed in each process',
      ).to.have.length(2)
      const third = await secondProcess(crashed, Sandbox)
      expect(third.session.checkpointed).to.deep.equal(['run1'])
      const outcome = await third.session.resume()
      await third.log.close()
      expect(third.bodies).to.deep.equal([])
      expect(outcome?.text).to.match(/run_code failed \(interrupted\): the session stopped while tools\.deploy\(\{\}\) was running, after it was let through/)
    })

    it('obeys its cpu budget when it loops forever before the call it waited on, after the restart', async () => {
      const path = await firstProcess(
        dir,
        Sandbox,
        "if ((await tools.$search('zebra')).length > 0) while (true) {}\nconst a = await tools.count({})\nreturn await tools.deploy({})",
      )
      const { bodies, log, session } = await secondProcess(path, Sandbox, ['zebra'])
      const outcome = await session.resume()
      await log.close()
      expect(outcome?.text).to.match(/run_code failed \(timeout\): the program computed for more than 500 ms of CPU time/)
      expect(bodies).to.deep.equal([])
    })
  })
}
