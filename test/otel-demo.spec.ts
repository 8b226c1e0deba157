// the demo session (`pnpm demo`'s deployment, script and workspace) traced by @faber/plugin-otel into the
// OpenTelemetry SDK's in-memory exporter: the span tree is what the session's own events say happened.

import { rm } from 'node:fs/promises'
import { AgentSession, ScriptedModel, type SessionEvent } from '@faber/agent'
import { assertStarted } from '@faber/core'
import * as Otel from '@faber/plugin-otel'
import { expect } from 'chai'
import { Context, Logger } from 'cordis'
import { DEMO_SCRIPT, DEMO_USER, demoDeployment, demoWorkspace } from '../packages/cli/src/demo.ts'
import { compose } from '../packages/cli/src/index.ts'
import { outline, record, tree } from '../plugins/otel/tests/helpers.ts'

Logger.levels.base = 0

const { ATTR } = Otel

describe('the demo session under @faber/plugin-otel', function () {
  this.timeout(60_000)

  it('exports the span tree of what happened: model requests, the collapsed call, run_code and its nested calls', async () => {
    const recorder = record()
    const root = await demoWorkspace('faber-otel-demo-')
    try {
      const spec = demoDeployment(root, 'code', 'otel demo')
      const context = new Context()
      context.plugin(Otel)
      const { ctx, agents } = await compose(spec, { context })
      try {
        await assertStarted(ctx)
        const events: SessionEvent[] = []
        const session = new AgentSession(ctx, { model: new ScriptedModel(DEMO_SCRIPT), agent: agents.get('main')!, onEvent: (e) => events.push(e) })
        const outcome = await session.send(DEMO_USER)
        session.dispose()
        expect(outcome.reason).to.equal('done')

        const roots = tree(recorder.exporter.getFinishedSpans())
        const keys = [ATTR.step, ATTR.outcome, ATTR.errorCode, ATTR.deniedByPlugin, ATTR.approval]
        const lines = outline(roots, keys)
        // the program's first three calls run together (Promise.all): their spans start in whatever order the
        // pipeline reached them, so that group is compared as a set
        lines.splice(4, 3, ...lines.slice(4, 7).sort())
        expect(lines).to.deep.equal([
          'chat scripted [step=1]',
          'execute_tool write [outcome=error error.code=UNKNOWN_TOOL]',
          'chat scripted [step=2]',
          'execute_tool run_code [outcome=ok]',
          '  execute_tool list [outcome=ok]',
          '  execute_tool read [outcome=ok]',
          '  execute_tool read [outcome=ok]',
          '  execute_tool edit [outcome=ok]',
          '  execute_tool edit [outcome=denied error.code=DENIED denied_by.plugin=fs-observation]',
          '  execute_tool read [outcome=ok]',
          '  execute_tool edit [outcome=ok]',
          '  execute_tool write [outcome=ok approval=allowed]',
          'chat scripted [step=3]',
        ])

        // the same story as the session's own events, call for call
        const direct = events.filter((e) => e.type === 'call-end').map((e) => e.call.name)
        const nested = events.filter((e) => e.type === 'nested-end').map((e) => `${e.event.name} ${e.event.result.isError ? e.event.result.error.code : 'ok'}`)
        const models = events.filter((e) => e.type === 'model-end').length
        expect(roots.filter((r) => r.name.startsWith('chat ')).length).to.equal(models)
        expect(roots.filter((r) => r.name.startsWith('execute_tool ')).map((r) => r.attributes[ATTR.tool])).to.deep.equal(direct)
        const program = roots.find((r) => r.attributes[ATTR.tool] === 'run_code')!
        expect(program.children.map((c) => `${c.attributes[ATTR.tool]} ${c.attributes[ATTR.errorCode] ?? 'ok'}`).sort()).to.deep.equal(nested.sort())
        for (const node of [...roots, ...program.children]) expect(node.attributes[ATTR.agent]).to.equal('main')
        const approved = program.children.find((c) => c.attributes[ATTR.approval] === 'allowed')!
        expect(approved.events.map((e) => `${e.attributes[ATTR.stage]} ${e.attributes[ATTR.decision]}`)).to.include('approval allowed')
      } finally {
        await ctx.stop()
      }
    } finally {
      await recorder.close()
      await rm(root, { recursive: true, force: true })
    }
  })
})
