// a question waiting for a person is kept in the deployment's store (SQLite, PostgreSQL), so another process sees it
// (`faber grants pending`, a real child process) and answers it (`faber grants answer`): the program checkpointed
// while it waited goes on, each body once, and the question leaves the store once decided

import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Json, ToolResult } from '@faber/core'
import { call, disposeAll } from '@faber/core/testing'
import { requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'
import { faber } from '../packages/cli/tests/helpers.ts'
import { deployWaiting } from './fixtures/waiting-person.ts'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const told = (result: ToolResult) => (result.isError ? `error: ${result.error.message}` : result.content)

/** what `faber grants pending --json` lists, from a process of its own */
async function pending(store: string): Promise<{ id: string; tool: string; callId: string; arguments: Json; decision?: string }[]> {
  const listed = await faber(['grants', 'pending', '--store', store, '--json'])
  expect(listed.stderr).to.equal('')
  return JSON.parse(listed.stdout)
}

async function answeredElsewhere(store: string, location: { path?: string; url?: string }) {
  const { ctx, bodies, decided } = await deployWaiting(location, { checkpointAfterMs: 100, grantWatchMs: 50 })
  const program = call(ctx, 'run_code', { code: 'const a = await tools.count({})\nreturn [a, await tools.deploy({})]', description: 'deploys' })
  let questions = await pending(store)
  while (!questions.length) {
    await sleep(50)
    questions = await pending(store)
  }
  expect(questions).to.have.length(1)
  expect(questions[0]).to.deep.include({ tool: 'deploy', arguments: {} })
  expect(questions[0].callId).to.match(/\/2$/)
  await sleep(200)
  expect(ctx.tools.waitingPrograms().checkpointed, 'the program waits checkpointed').to.equal(1)
  const answered = await faber(['grants', 'answer', questions[0].id, 'allow', '--store', store])
  expect(answered.stdout).to.equal(`answered ${questions[0].id}: allow\n`)
  expect(told(await program)).to.equal('[1,"deployed"]')
  expect(bodies).to.deep.equal(['count', 'deploy'])
  expect(decided.map((d) => [d.outcome, d.answeredBy])).to.deep.equal([['allowed', 'approval-store']])
  expect(await pending(store), 'a decided question leaves the store').to.deep.equal([])
  const again = await faber(['grants', 'answer', questions[0].id, 'reject', '--store', store])
  expect(again.code).to.equal(1)
  expect(again.stderr).to.contain(`no question "${questions[0].id}" waits for an answer`)
}

describe('questions waiting for a person, kept in the store', function () {
  this.timeout(60_000)
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-pending-'))
  })
  afterEach(async () => {
    await disposeAll()
    await rm(dir, { recursive: true, force: true })
  })

  it('SQLite: another process lists the question and answers it, and the checkpointed program goes on', async () => {
    const store = join(dir, 'faber.db')
    await answeredElsewhere(store, { path: store })
  })

  it('PostgreSQL: the same', async function () {
    const cluster = await requirePostgres(this)
    const url = await cluster.database()
    await answeredElsewhere(url, { url })
  })
})
