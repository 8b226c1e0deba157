// the same fs tools, shown to one agent natively and to another as code (run_code + a typed SDK), doing the same
// task on a scripted model. what each is shown and what re-enters its conversation is printed side by side.

import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { AgentSession, type Message, ScriptedModel, type ScriptStep } from '@faber/agent'
import ToolRuntime, { createAgent } from '@faber/core'
import ToolsFs from '@faber/plugin-tools-fs'
import WorkerSandbox from '@faber/sandbox'
import { Context, Logger } from 'cordis'

const FILES = {
  'a.txt': 'one\ntwo\nthree\n',
  'b.txt': 'four\nfive\n',
  'c.txt': 'six\nseven\neight\nnine\n',
}
const TASK = 'How many lines do a.txt, b.txt and c.txt have together?'

// native: the model calls read three times (concurrency-safe, so they overlap), then counts from the file contents
const nativeScript: ScriptStep[] = [
  { toolCalls: Object.keys(FILES).map((path) => ({ name: 'read', arguments: { path } })) },
  ({ results }) => {
    const total = results.reduce((sum, r) => sum + Number(/\((?:version [^,]+, )?(\d+) lines?/.exec(r.content)?.[1] ?? 0), 0)
    return { text: `${total} lines.` }
  },
]

// code: one program reads the three files in parallel and returns only the count
const codeScript: ScriptStep[] = [
  {
    toolCalls: [
      {
        name: 'run_code',
        arguments: {
          description: 'count the lines of three files',
          code: [
            "const files = await Promise.all(['a.txt', 'b.txt', 'c.txt'].map((path) => tools.read({ path })))",
            'return files.reduce((sum, f) => sum + f.totalLines, 0)',
          ].join('\n'),
        },
      },
    ],
  },
  ({ results }) => ({ text: `${results[0].content} lines.` }),
]

export interface Side {
  agent: string
  mode: string
  /** tool schemas on the wire */
  shown: string[]
  /** bytes of tool schemas sent with every model call */
  schemaBytes: number
  /** bytes of the system prompt the registry contributes (the code-only rule, the SDK) */
  promptBytes: number
  modelCalls: number
  toolCalls: number
  /** bytes of tool results that re-entered the conversation */
  resultBytes: number
  answer: string
}

export async function quickstart(): Promise<Side[]> {
  const root = await mkdtemp(join(tmpdir(), 'faber-quickstart-'))
  for (const [path, text] of Object.entries(FILES)) await writeFile(join(root, path), text)
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  ctx.plugin(WorkerSandbox)
  ctx.plugin(ToolsFs, { root })
  await ctx.start()
  try {
    const sides: Side[] = []
    for (const [name, mode, script] of [
      ['native-agent', 'native', nativeScript],
      ['code-agent', 'code', codeScript],
    ] as const) {
      const agent = createAgent(ctx, { name })
      agent.ctx.tools.presentAs(mode)
      const session = new AgentSession(ctx, { agent, model: new ScriptedModel(script) })
      const outcome = await session.send(TASK)
      session.dispose()
      const wire = ctx.tools.wire(agent)
      const results = session.messages.filter((m): m is Extract<Message, { role: 'tool' }> => m.role === 'tool')
      sides.push({
        agent: name,
        mode,
        shown: wire.tools.map((t) => t.name),
        schemaBytes: JSON.stringify(wire.tools).length,
        promptBytes: wire.sections.reduce((n, s) => n + s.text.length, 0),
        modelCalls: outcome.steps,
        toolCalls: results.length,
        resultBytes: results.reduce((n, r) => n + r.content.length, 0),
        answer: outcome.text,
      })
    }
    return sides
  } finally {
    await ctx.stop()
    await rm(root, { recursive: true, force: true })
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  Logger.levels.base = 1
  const sides = await quickstart()
  const rows: [string, (s: Side) => string | number][] = [
    ['shown to the model', (s) => s.shown.join(', ')],
    ['tool schema bytes per model call', (s) => s.schemaBytes],
    ['registry prompt bytes (rule + SDK)', (s) => s.promptBytes],
    ['model calls', (s) => s.modelCalls],
    ['direct tool calls', (s) => s.toolCalls],
    ['result bytes back in the context', (s) => s.resultBytes],
    ['answer', (s) => s.answer],
  ]
  console.log(`task: ${TASK}\n`)
  console.log(`${''.padEnd(36)}${sides.map((s) => `${s.agent} (${s.mode})`.padEnd(44)).join('')}`)
  for (const [label, get] of rows) console.log(`${label.padEnd(36)}${sides.map((s) => String(get(s)).padEnd(44)).join('')}`)
}
