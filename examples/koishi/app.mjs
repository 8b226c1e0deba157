// Faber inside a Koishi bot: the runtime, a sandbox, guards and approval are loaded into a Koishi App like any Koishi
// plugin, and Koishi commands run Faber tools. Koishi's middleware, commands and the mock client are Koishi's own.
// run it in a project where koishi, @koishijs/plugin-mock and the Faber packages are installed (see the README).

import { createRequire } from 'node:module'
import ToolRuntime, { createAgent, defineTool, t } from '@faber/core'
import Approval from '@faber/plugin-approval'
import * as Guards from '@faber/plugin-guards'
import Sandbox from '@faber/sandbox'

// koishi's ESM build does not load on Node 20 (its loader's); its CommonJS one does, and shares cordis with Faber
const require = createRequire(import.meta.url)
const { App } = require('koishi')
const { default: mock } = require('@koishijs/plugin-mock')

/** the answer a chat user reads: the content of a success, or the error code and message */
const reply = (result) => (result.isError ? `${result.error.code}: ${result.error.message}` : result.content)

// the bot's own plugin: Faber tools, an agent that writes programs, and the commands that call them
const FaberBot = {
  name: 'faber-bot',
  inject: ['tools'],
  apply(ctx) {
    for (const name of ['echo', 'drop_table', 'pay']) {
      ctx.tools.register(
        defineTool({
          name,
          description: `${name} (a demo tool)`,
          parameters: t.object({ text: t.string() }),
          output: { schema: t.object({ echoed: t.string() }), render: (_, value) => value.echoed },
          execute: ({ text }) => ({ echoed: `${name}: ${text}` }),
        }),
      )
    }
    // calls as the model of a Code Mode agent would make them: run_code, and nothing else directly
    const coder = createAgent(ctx, { name: 'coder' })
    coder.ctx.tools.presentAs('code')
    let calls = 0
    const execute = (name, args, agent) => ctx.tools.execute({ callId: `koishi-${++calls}`, name, arguments: args, agent, signal: AbortSignal.timeout(30_000) })

    ctx
      .command('tool <name:string> <text:text>', 'call a Faber tool directly')
      .option('coder', '-c  call it as the Code Mode agent')
      .action(async ({ options }, name, text) => reply(await execute(name, { text }, options.coder ? coder : undefined)))
    ctx.command('code <program:text>', 'run a program in the sandbox as the Code Mode agent').action(async (_, program) => {
      const result = await execute('run_code', { code: program, description: 'from a Koishi command' }, coder)
      return result.isError ? reply(result) : JSON.stringify(result.value.result)
    })
  },
}

export async function createBot() {
  const app = new App()
  app.plugin(mock)
  app.plugin(ToolRuntime, { mode: 'native' })
  app.plugin(Sandbox, { poolSize: 1 })
  app.plugin(Guards, { deny: [{ tools: ['drop_*'], reason: 'tables are never dropped from chat' }] })
  app.plugin(Approval, { require: ['pay'] })
  app.plugin(FaberBot)
  // Koishi's own middleware, beside Faber's commands
  app.middleware((session, next) => (session.content === 'ping' ? 'pong' : next()))
  await app.start()
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await createBot()
  const client = app.mock.client('alice')
  for (const message of [
    'tool echo hello',
    'tool drop_table users',
    'tool pay 10 EUR',
    'tool -c echo hello',
    "code const a = await tools.echo({ text: 'a' }); const b = await tools.echo({ text: 'b' }); return [a.echoed, b.echoed]",
    'ping',
  ]) {
    console.log(`> ${message}`)
    for (const answer of await client.receive(message)) console.log(answer)
  }
  await app.stop()
}
