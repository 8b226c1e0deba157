// pending approvals attacked from outside: two processes sharing a store race for the one answer a stopped process's
// question received. exactly one of them may take it; the other asks as usual, and the body runs once

import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { defineTool, type Json, type ToolResult, t } from '@faber/core'
import { call, deployment, disposeAll } from '@faber/core/testing'
import Approval, { type ApprovalDecided, GrantStore, PendingQuestions } from '@faber/plugin-approval'
import IsolateSandboxService from '@faber/sandbox-isolate'
import DeploymentStore, { openStore } from '@faber/store'
import { expect } from 'chai'
import type { Context } from 'cordis'
import { faber } from '../packages/cli/tests/helpers.ts'

async function deploy(path: string, bodies: string[], gate: Promise<void>, arrived: () => void) {
  const decided: ApprovalDecided[] = []
  const ctx = await deployment({ mode: 'code' }, (ctx) => {
    ctx.plugin(IsolateSandboxService, { poolSize: 1 })
    ctx.plugin(DeploymentStore, { path })
    ctx.plugin(Approval, { require: [], grantWatchMs: 50 })
    ctx.plugin({
      name: 'audit',
      apply: (ctx: Context) => {
        ctx.on('approval/decided', (event: ApprovalDecided) => void decided.push(event))
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

  it('two processes running the same program again take the answer its stopped asker left once, not twice', async () => {
    const path = join(dir, 'faber.db')
    // the question a process that was killed while it asked left behind (its owner is no live process), answered since
    const store = await openStore({ path })
    const grants = new GrantStore(store)
    const questions = new PendingQuestions(store, () => grants.ready())
    const id = await questions.ask({ rootCallId: 'run-1', callId: 'run-1/1', tool: 'deploy', arguments: {}, reason: 'asked' })
    expect(await questions.answer(id, 'allow', 'operator')).to.equal(true)
    await store.close()

    const bodies: string[] = []
    let open!: () => void
    const gate = new Promise<void>((resolve) => (open = resolve))
    let waiting = 0
    const arrived = () => ++waiting === 2 && open()
    const a = await deploy(path, bodies, gate, arrived)
    const b = await deploy(path, bodies, gate, arrived)
    const program = { code: 'return await tools.deploy({})', description: 'deploys' }
    const results = await Promise.all([a, b].map(({ ctx }) => call(ctx, 'run_code', program, { callId: 'run-1' })))
    expect(bodies, 'the body runs once').to.deep.equal(['deploy'])
    expect(results.map(told).sort()).to.deep.equal(['deployed', 'error: CODE_RUN_FAILED'])
    const outcomes = [...a.decided, ...b.decided].map((d) => `${d.outcome} ${d.answeredBy}`).sort()
    expect(outcomes, 'the other asks as usual (here nobody answers)').to.deep.equal(['allowed approval-store', 'unavailable none'])
    const after = await openStore({ path })
    expect(await new PendingQuestions(after, () => new GrantStore(after).ready()).list(), 'the answer taken leaves the store').to.deep.equal([])
    await after.close()
  })

  it('two faber grants answer processes at once: exactly one answer wins, the other is told it came too late', async () => {
    const path = join(dir, 'faber.db')
    const store = await openStore({ path })
    const questions = new PendingQuestions(store, () => new GrantStore(store).ready())
    const odd = '{"__proto__":{"polluted":1},"constructor":{"prototype":2}}'
    const id = await questions.ask({ rootCallId: 'run-1', callId: 'run-1/1', tool: 'deploy', arguments: JSON.parse(odd), reason: 'asked' })
    const listed = await faber(['grants', 'pending', '--store', path, '--json'])
    expect(JSON.stringify(JSON.parse(listed.stdout)[0].arguments), 'odd keys are shown as they were asked').to.equal(odd)
    const [allow, reject] = await Promise.all(['allow', 'reject'].map((decision) => faber(['grants', 'answer', id, decision, '--store', path])))
    const [won, lost] = allow.code === 0 ? [allow, reject] : [reject, allow]
    const decision = won === allow ? 'allow' : 'reject'
    expect(won.code).to.equal(0)
    expect(won.stdout).to.equal(`answered ${id}: ${decision}\n`)
    expect(lost.code).to.equal(1)
    expect(lost.stderr).to.match(new RegExp(`question "${id}" was answered already \\(${decision} by faber grants answer at `))
    expect(await questions.get(id)).to.deep.include({ decision, answeredBy: 'faber grants answer' })
    await store.close()
  })
})
