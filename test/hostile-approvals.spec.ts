// pending approvals attacked from outside: two processes sharing a store run the same program again and race for the
// question a stopped process left for its call, answered already or answered while they wait. exactly one of them
// takes it over; the other asks as usual, and the body runs once

import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { defineTool, type Json, type ToolResult, t } from '@faber/core'
import { call, deployment, disposeAll } from '@faber/core/testing'
import Approval, { type ApprovalDecided, GrantStore, PendingQuestions } from '@faber/plugin-approval'
import IsolateSandboxService from '@faber/sandbox-isolate'
import DeploymentStore, { openStore } from '@faber/store'
import { requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'
import type { Context } from 'cordis'
import { faber } from '../packages/cli/tests/helpers.ts'
import { never, person } from './fixtures/waiting-person.ts'

/** `asks`: a person who is asked and never answers (the store's answer is the one that counts), or nobody to ask */
async function deploy(path: string, bodies: string[], gate: Promise<void>, arrived: () => void, asks = false) {
  const decided: ApprovalDecided[] = []
  const ctx = await deployment({ mode: 'code' }, (ctx) => {
    ctx.plugin(IsolateSandboxService, { poolSize: 1 })
    ctx.plugin(DeploymentStore, { path })
    ctx.plugin(Approval, { require: [], grantWatchMs: 50 })
    ctx.plugin({
      name: 'audit',
      apply: (ctx: Context) => {
        ctx.on('approval/decided', (event: ApprovalDecided) => void decided.push(event))
        if (asks) person(ctx, never)
        // both processes ask their approval at the same moment
        ctx.on('tools/pre-execute', async (exec) => {
          if (exec.name !== 'deploy') return
          arrived()
          await gate
          return { kind: 'ask', reason: 'deploys' }
        })
      },
    })
  })
  ctx.tools.register(
    defineTool({
      name: 'deploy',
      description: 'deploy',
      parameters: t.object({}),
      output: { schema: t.unknown() },
      execute: (): Json => {
        bodies.push('deploy')
        return 'deployed'
      },
    }),
  )
  return { ctx, decided }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const told = (result: ToolResult) => (result.isError ? `error: ${result.error.code}` : result.content)

describe('hostile: pending approvals', function () {
  this.timeout(30_000)
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-hostile-approvals-'))
  })
  afterEach(async () => {
    await disposeAll()
    await rm(dir, { recursive: true, force: true })
  })

  /** a question a process that was killed while it asked left behind: its owner is no live process */
  async function leftBehind(path: string, answer?: 'allow') {
    const store = await openStore({ path })
    const questions = new PendingQuestions(store, () => new GrantStore(store).ready())
    const expiresAt = new Date(Date.now() + 60_000).toISOString()
    const id = await questions.ask({ session: 's-1', rootCallId: 'run-1', callId: 'run-1/1', tool: 'deploy', arguments: {}, reason: 'asked', expiresAt })
    if (answer) expect(await questions.answer(id, answer, 'operator')).to.equal(true)
    return { id, questions, close: () => store.close() }
  }

  /** two processes run the program of the run_code call run-1 again at once; their nested deploy asks at the same moment */
  async function twoAgain(path: string, person: boolean) {
    const bodies: string[] = []
    let open!: () => void
    const gate = new Promise<void>((resolve) => (open = resolve))
    let waiting = 0
    const arrived = () => ++waiting === 2 && open()
    const a = await deploy(path, bodies, gate, arrived, person)
    const b = await deploy(path, bodies, gate, arrived, person)
    const program = { code: 'return await tools.deploy({})', description: 'deploys' }
    const results = Promise.all([a, b].map(({ ctx }) => call(ctx, 'run_code', program, { callId: 'run-1', session: 's-1' })))
    return { bodies, results, decided: () => [...a.decided, ...b.decided].map((d) => `${d.outcome} ${d.answeredBy}`).sort() }
  }

  it('answered before they ask: one takes the answer, the other asks as usual, the body runs once', async () => {
    const path = join(dir, 'faber.db')
    const left = await leftBehind(path, 'allow')
    const { bodies, results, decided } = await twoAgain(path, false)
    expect((await results).map(told).sort()).to.deep.equal(['deployed', 'error: CODE_RUN_FAILED'])
    expect(bodies, 'the body runs once').to.deep.equal(['deploy'])
    expect(decided(), 'the other asks as usual (here nobody answers)').to.deep.equal(['allowed approval-store', 'unavailable none'])
    await left.close()
  })

  it('answered while they wait: the one that took the question over goes on, the other waits on its own', async () => {
    const path = join(dir, 'faber.db')
    const left = await leftBehind(path)
    const { bodies, results, decided } = await twoAgain(path, true)
    // the second asker writes a question of its own after grantWatchMs (50 ms)
    let listed = await left.questions.list()
    for (let tries = 0; listed.length < 2 && tries < 100; tries++) {
      await sleep(20)
      listed = await left.questions.list()
    }
    expect(
      listed.map((q) => q.tool),
      'one took the question over, the other asks its own',
    ).to.deep.equal(['deploy', 'deploy'])
    expect(await left.questions.answer(left.id, 'allow', 'operator')).to.equal(true)
    while (!bodies.length) await sleep(20)
    await sleep(300)
    expect(bodies, 'one answer, one body').to.deep.equal(['deploy'])
    const other = listed.find((q) => q.id !== left.id)!
    expect(await left.questions.answer(other.id, 'reject', 'operator')).to.equal(true)
    expect((await results).map(told).sort()).to.deep.equal(['deployed', 'error: CODE_RUN_FAILED'])
    expect(bodies).to.deep.equal(['deploy'])
    expect(decided()).to.deep.equal(['allowed approval-store', 'rejected approval-store'])
    await left.close()
  })

  /** two `faber grants answer` processes answer one question at once, on the store `at` (a file or a URL) */
  async function answeredTwice(at: string, location: { path: string } | { url: string }) {
    const store = await openStore(location)
    const questions = new PendingQuestions(store, () => new GrantStore(store).ready())
    const odd = '{"__proto__":{"polluted":1},"constructor":{"prototype":2}}'
    const expiresAt = new Date(Date.now() + 60_000).toISOString()
    const id = await questions.ask({ rootCallId: 'run-1', callId: 'run-1/1', tool: 'deploy', arguments: JSON.parse(odd), reason: 'asked', expiresAt })
    const listed = await faber(['grants', 'pending', '--store', at, '--json'])
    expect(JSON.stringify(JSON.parse(listed.stdout)[0].arguments), 'odd keys are shown as they were asked').to.equal(odd)
    const [allow, reject] = await Promise.all(['allow', 'reject'].map((decision) => faber(['grants', 'answer', id, decision, '--store', at])))
    const [won, lost] = allow.code === 0 ? [allow, reject] : [reject, allow]
    const decision = won === allow ? 'allow' : 'reject'
    expect(won.code).to.equal(0)
    expect(won.stdout).to.equal(`answered ${id}: ${decision}\n`)
    expect(lost.code).to.equal(1)
    expect(lost.stderr).to.match(new RegExp(`question "${id}" was answered already \\(${decision} by faber grants answer at `))
    expect(await questions.get(id)).to.deep.include({ decision, answeredBy: 'faber grants answer' })
    await store.close()
  }

  it('two faber grants answer processes at once: exactly one answer wins, the other is told it came too late', async () => {
    const path = join(dir, 'faber.db')
    await answeredTwice(path, { path })
  })

  it('PostgreSQL: the same', async function () {
    const cluster = await requirePostgres(this)
    const url = await cluster.database()
    await answeredTwice(url, { url })
  })
})
