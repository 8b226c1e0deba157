// an answer left in the store by a process that stopped is taken only by the program it was asked for: the same
// session (not another session whose model reuses the tool-call id and makes the same call) and before the question's
// deadline. anything else asks again. a crash is the log and the store as they stood on disk at that moment

import { copyFileSync, existsSync } from 'node:fs'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AgentSession, ScriptedModel, type ScriptStep, SessionLog } from '@faber/agent'
import { disposeAll } from '@faber/core/testing'
import { GrantStore, PendingQuestions } from '@faber/plugin-approval'
import { openStore } from '@faber/store'
import { expect } from 'chai'
import { faber } from '../packages/cli/tests/helpers.ts'
import { deployWaiting } from './fixtures/waiting-person.ts'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
async function until(check: () => boolean | Promise<boolean>) {
  while (!(await check())) await sleep(10)
}

const PROGRAM = 'const a = await tools.count({})\nreturn [a, await tools.deploy({})]'
// the same tool-call id in every session, as ScriptedModel's call_N ids (and some providers') are
const said: ScriptStep = (view) => ({ text: `the program said: ${view.results[0]?.content}` })
const script = (): ScriptStep[] => [{ toolCalls: [{ id: 'call_1', name: 'run_code', arguments: { code: PROGRAM, description: 'deploys' } }] }, said]

const questionsIn = async <T>(path: string, use: (questions: PendingQuestions) => Promise<T>): Promise<T> => {
  const store = await openStore({ path })
  try {
    return await use(new PendingQuestions(store, () => new GrantStore(store).ready()))
  } finally {
    await store.close()
  }
}

/**
 * a session whose program asks its question, is checkpointed, and whose process then stops: the log and the store as
 * they stood on disk then, and the question's id
 */
async function stoppedWhileAsking(dir: string, timeoutMs: number) {
  const store = join(dir, 'live.db')
  const path = join(dir, 'live.jsonl')
  const { ctx } = await deployWaiting({ path: store }, { checkpointAfterMs: 50, grantWatchMs: 20, timeoutMs })
  const log = await SessionLog.open(path)
  const session = new AgentSession(ctx, { model: new ScriptedModel(script()), log })
  const stop = new AbortController()
  const turn = session.send('deploy it', { signal: stop.signal })
  await until(async () => ctx.tools.waitingPrograms().checkpointed === 1 && (await readFile(path, 'utf8')).includes('"type":"checkpoint"'))
  await until(async () => (await questionsIn(store, (q) => q.list())).length === 1)
  const crashed = { log: join(dir, 'session.jsonl'), store: join(dir, 'faber.db') }
  copyFileSync(path, crashed.log)
  copyFileSync(store, crashed.store)
  if (existsSync(`${store}-wal`)) copyFileSync(`${store}-wal`, `${crashed.store}-wal`)
  stop.abort()
  await turn
  await log.close()
  const [question] = await questionsIn(crashed.store, (q) => q.list())
  return { ...crashed, question }
}

/** a process after the restart: a fresh deployment on `store`, continuing the session in `log` (or a new one) */
async function later(log: string, store: string, timeoutMs: number) {
  const { ctx, bodies, decided } = await deployWaiting({ path: store }, { checkpointAfterMs: 50, grantWatchMs: 20, timeoutMs })
  const opened = await SessionLog.open(log)
  // a session continued goes on with the program's result; a new one starts with the model's program
  const session = new AgentSession(ctx, { model: new ScriptedModel(opened.resumed ? [said] : script()), log: opened })
  return { ctx, bodies, decided, session, log: opened }
}

describe('an answer left in the store answers only its own call', function () {
  this.timeout(30_000)
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-stale-'))
  })
  afterEach(async () => {
    await disposeAll()
    await rm(dir, { recursive: true, force: true })
  })

  it('another session making the same call with the same tool-call id asks again; the session that asked takes it', async () => {
    const crashed = await stoppedWhileAsking(dir, 60_000)
    expect(await questionsIn(crashed.store, (q) => q.answer(crashed.question.id, 'allow', 'operator'))).to.equal(true)

    // a new session on the same store: its model's first call has the same id, program and arguments
    const other = await later(join(dir, 'other.jsonl'), crashed.store, 300)
    const outcome = await other.session.send('deploy it')
    await other.log.close()
    expect(other.bodies, 'its deploy was not let through by the answer of the other session').to.deep.equal(['count'])
    expect(other.decided.map((d) => [d.outcome, d.answeredBy])).to.deep.equal([['timed-out', 'person']])
    expect(outcome.text).to.contain('denied')
    expect(
      (await questionsIn(crashed.store, (q) => q.list())).map((q) => [q.id, q.decision]),
      'the answer is still there',
    ).to.deep.equal([[crashed.question.id, 'allow']])

    // the session that asked, continued: its program takes the answer, and the body runs once
    const own = await later(crashed.log, crashed.store, 300)
    const resumed = await own.session.resume()
    await own.log.close()
    expect(resumed?.text).to.equal('the program said: [1,"deployed"]')
    expect(own.bodies).to.deep.equal(['deploy'])
    expect(own.decided.map((d) => [d.outcome, d.answeredBy])).to.deep.equal([['allowed', 'approval-store']])
  })

  it('an answer past the deadline of its question answers nothing: the program asks again, and the question is swept', async () => {
    const crashed = await stoppedWhileAsking(dir, 800)
    expect(crashed.question.session, 'the question names its session').to.be.a('string')
    expect(Date.parse(crashed.question.expiresAt) - Date.parse(crashed.question.askedAt)).to.be.within(700, 900)
    expect(await questionsIn(crashed.store, (q) => q.answer(crashed.question.id, 'allow', 'operator'))).to.equal(true)
    await sleep(Date.parse(crashed.question.expiresAt) - Date.now() + 50)

    const own = await later(crashed.log, crashed.store, 300)
    await own.session.resume()
    await own.log.close()
    expect(own.bodies, 'the expired answer let nothing through').to.deep.equal([])
    expect(own.decided.map((d) => [d.outcome, d.answeredBy])).to.deep.equal([['timed-out', 'person']])
    expect(await questionsIn(crashed.store, (q) => q.list()), 'the expired question left the store').to.deep.equal([])
  })

  it('faber grants answer refuses an expired question, saying so', async () => {
    const path = join(dir, 'faber.db')
    const id = await questionsIn(path, (q) =>
      q.ask({
        session: 's',
        rootCallId: 'r',
        callId: 'r/1',
        tool: 'deploy',
        arguments: {},
        reason: 'asked',
        expiresAt: new Date(Date.now() - 1).toISOString(),
      }),
    )
    const answered = await faber(['grants', 'answer', id, 'allow', '--store', path])
    expect(answered.code).to.equal(1)
    expect(answered.stderr).to.contain(`question "${id}" expired at `)
    expect(answered.stderr).to.contain('The program asks again when its session is continued')
    expect(await questionsIn(path, async (q) => [await q.get(id), await q.list()])).to.deep.equal([undefined, []])
  })
})
