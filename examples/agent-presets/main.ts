// a preset is an agent others name as their parent. its mode, its restrictions and the policy registered on its
// context apply to every agent below it; a child may override the mode, but a mask or a guard only tightens.

import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { AgentSession, type Message, ScriptedModel, type ScriptStep } from '@faber/agent'
import ToolRuntime, { type Agent, createAgent } from '@faber/core'
import ToolsFs from '@faber/plugin-tools-fs'
import WorkerSandbox from '@faber/sandbox'
import { Context, Logger } from 'cordis'

export interface AgentView {
  agent: string
  chain: string[]
  mode: string
  /** the agent whose presentAs decided the mode */
  modeFrom: string
  visible: string[]
  shown: string[]
  /** what each tool call of its session came back with */
  outcomes: string[]
}

// alice inherits code mode: one program that reads, tries a binding the preset masked, and reads a guarded file
const aliceScript: ScriptStep[] = [
  {
    toolCalls: [
      {
        name: 'run_code',
        arguments: {
          description: 'review the readme; try to fix it; peek at secrets',
          code: [
            "const readme = await tools.read({ path: 'README.md' })",
            "const canWrite = typeof (tools as any).write === 'function'",
            'let secret = "not attempted"',
            'try {',
            "  await tools.read({ path: 'secrets/key.txt' })",
            '  secret = "read"',
            '} catch (error) {',
            '  secret = error instanceof ToolCallError ? error.message : String(error)',
            '}',
            'return { lines: readme.totalLines, canWrite, secret }',
          ].join('\n'),
        },
      },
    ],
  },
  { text: 'reviewed' },
]

// bob overrides the mode to both: native calls run, but write stays masked and secrets/ stays guarded
const bobScript: ScriptStep[] = [
  {
    toolCalls: [
      { name: 'read', arguments: { path: 'README.md' } },
      { name: 'write', arguments: { path: 'README.md', content: 'rewritten' } },
      { name: 'read', arguments: { path: 'secrets/key.txt' } },
    ],
  },
  { text: 'reviewed' },
]

function outcomesOf(messages: Message[]) {
  return messages.filter((m): m is Extract<Message, { role: 'tool' }> => m.role === 'tool').map((m) => `${m.name}: ${m.content.replace(/\s*\n\s*/g, ' ')}`)
}

export async function agentPresets(): Promise<AgentView[]> {
  const root = await mkdtemp(join(tmpdir(), 'faber-presets-'))
  await mkdir(join(root, 'secrets'))
  await writeFile(join(root, 'README.md'), '# project\n\nsome text\n')
  await writeFile(join(root, 'secrets', 'key.txt'), 'hunter2\n')
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  ctx.plugin(WorkerSandbox)
  ctx.plugin(ToolsFs, { root })
  await ctx.start()
  try {
    const preset = createAgent(ctx, { name: 'reviewer' })
    preset.ctx.tools.presentAs('code')
    preset.ctx.tools.restrict({ deny: ['write', 'edit'] })
    preset.ctx.tools.guard((exec) => {
      const path = (exec.arguments as { path?: unknown })?.path
      if (typeof path === 'string' && path.replace(/^\.\//, '').startsWith('secrets/')) return 'reviewers do not read secrets/; ask the owner instead'
    })
    const alice = createAgent(ctx, { name: 'alice', parent: preset })
    const bob = createAgent(ctx, { name: 'bob', parent: preset })
    bob.ctx.tools.presentAs('both')

    const view = async (agent: Agent, script: ScriptStep[]): Promise<AgentView> => {
      const session = new AgentSession(ctx, { agent, model: new ScriptedModel(script) })
      await session.send('review the project')
      session.dispose()
      const origin = ctx.tools.modeOrigin(agent)
      return {
        agent: agent.name,
        chain: agent.chain().map((a) => a.name),
        mode: origin.mode,
        modeFrom: origin.from?.name ?? 'deployment default',
        visible: ctx.tools.schemas(agent).map((s) => s.name),
        shown: ctx.tools.wire(agent).tools.map((t) => t.name),
        outcomes: outcomesOf(session.messages),
      }
    }
    return [await view(alice, aliceScript), await view(bob, bobScript)]
  } finally {
    await ctx.stop()
    await rm(root, { recursive: true, force: true })
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  Logger.levels.base = 1
  for (const view of await agentPresets()) {
    console.log(`agent ${view.agent} (chain ${view.chain.join(' → ')})`)
    console.log(`  mode ${view.mode}, set by ${view.modeFrom}`)
    console.log(`  visible: ${view.visible.join(', ')}`)
    console.log(`  shown:   ${view.shown.join(', ')}`)
    for (const outcome of view.outcomes) console.log(`  ${outcome.length > 150 ? `${outcome.slice(0, 149)}…` : outcome}`)
    console.log()
  }
}
