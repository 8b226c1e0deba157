// `faber demo`: a code-mode deployment with the standard plugin stack, a real temporary workspace, the real sandbox and
// a ScriptedModel playing a realistic session. what the closing summary says is read from the session's own events.

import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { AgentSession, ScriptedModel, type ScriptStep, type SessionEvent, SessionLog } from '@faber/agent'
import { compose, type DeploymentSpec, readDeployment } from './deployment.ts'
import { standardStack } from './stack.ts'
import type { Style } from './style.ts'
import { Transcript } from './transcript.ts'

export interface DemoOptions {
  json: boolean
  keep: boolean
  /** write the session log (JSONL) here */
  log?: string
  style: Style
  output?: NodeJS.WritableStream & { isTTY?: boolean }
  /** serve the inspector's live web view during the demo, then keep it (and the deployment) until `hold` settles */
  web?: { host: string; port: number; token?: string; hold: () => Promise<void> }
}

export const DEMO_FILES: Record<string, string> = {
  'README.md': '# greeter\n\nA tiny greeting library.\n',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the content of a TypeScript file
  'src/greet.ts': 'export function greet(name: string) {\n  return `Hello, ${name}!`\n}\n',
  'src/config.ts': "export const config = { greeting: 'Howdy', punctuation: '!' }\n",
  'TODO.md': '- [ ] make the greeting configurable\n- [ ] keep a changelog\n',
}

export const DEMO_USER = 'Make greet() use the greeting from src/config.ts, tick the TODO item, and start a CHANGELOG.md.'

export const DEMO_CHANGELOG = '# Changelog\n\n- greet() takes its greeting and punctuation from src/config.ts\n'

// the program the model writes; it runs in the sandbox and reaches every tool through the SDK
export const DEMO_PROGRAM = `// read what the change touches, in parallel
const [greet, config, files] = await Promise.all([
  tools.read({ path: 'src/greet.ts' }),
  tools.read({ path: 'src/config.ts' }),
  tools.list({}),
])
console.log(\`read \${greet.path} and \${config.path}; the workspace holds \${files.entries.map((e) => e.name).join(', ')}\`)

await tools.edit({
  path: 'src/greet.ts',
  oldString: 'export function greet(name: string) {\\n  return \`Hello, \${name}!\`',
  newString: "import { config } from './config.ts'\\n\\nexport function greet(name: string) {\\n  return \`\${config.greeting}, \${name}\${config.punctuation}\`",
})

// TODO.md has not been read in this session: the fs-observation policy may refuse the edit
const tick = { path: 'TODO.md', oldString: '- [ ] make the greeting configurable', newString: '- [x] make the greeting configurable' }
try {
  await tools.edit(tick)
} catch (error) {
  if (!(error instanceof ToolCallError)) throw error
  console.log(\`refused: \${error.message}\`)
  await tools.read({ path: 'TODO.md' })
  await tools.edit(tick)
  console.log('read TODO.md, then the edit went through')
}

// creating a file needs approval in this deployment
const changelog = await tools.write({ path: 'CHANGELOG.md', content: ${JSON.stringify(DEMO_CHANGELOG)} })
return { edited: ['src/greet.ts', 'TODO.md'], created: changelog.path }`

/** the session the scripted model plays */
export const DEMO_SCRIPT: ScriptStep[] = [
  // 1. the failure the seed note reports: a direct call of a native tool, though the model was shown only run_code
  {
    text: 'I will start the changelog first.',
    toolCalls: [{ name: 'write', arguments: { path: 'CHANGELOG.md', content: DEMO_CHANGELOG } }],
  },
  // 2. corrected by the route in the error: one run_code program
  {
    text: 'Right: here tools are reached through run_code. One program does the whole change.',
    toolCalls: [{ name: 'run_code', arguments: { code: DEMO_PROGRAM, description: 'make the greeting configurable, tick the TODO, start a changelog' } }],
  },
  // 3. a summary made from the program's result
  ({ results }) => {
    const result = results[0]
    if (result.isError) return { text: `The program failed: ${result.content}` }
    return {
      text: `Done. ${result.content.split('\n').filter((l) => l.startsWith('refused')).length ? 'TODO.md needed a read before its edit; ' : ''}greet() now uses config.greeting, the TODO item is ticked, and CHANGELOG.md exists.`,
    }
  },
]

interface Facts {
  direct: { name: string; code?: string; stages: string[] }[]
  nested: { name: string; ok: boolean; code?: string; by?: string; ms: number }[]
  overlapped: number
  approvals: { event: string; tool?: string; outcome?: string; answeredBy?: string }[]
}

function collect(events: SessionEvent[]): Facts {
  const facts: Facts = { direct: [], nested: [], overlapped: 0, approvals: [] }
  let open = 0
  for (const event of events) {
    if (event.type === 'call-end') {
      const { result, call } = event
      facts.direct.push({
        name: call.name,
        code: result.isError ? result.error.code : undefined,
        stages: (result.trace ?? []).map((s) => `${s.stage} ${s.decision} by ${s.by}`),
      })
    } else if (event.type === 'nested-start') {
      open++
      facts.overlapped = Math.max(facts.overlapped, open)
    } else if (event.type === 'nested-end') {
      open--
      const { result, name, durationMs } = event.event
      facts.nested.push({
        name,
        ok: !result.isError,
        code: result.isError ? result.error.code : undefined,
        by: result.isError ? (result.error.deniedBy ?? result.error.withheldBy)?.plugin : undefined,
        ms: durationMs,
      })
    } else if (event.type === 'approval') {
      const d = event.detail as { tool?: string; outcome?: string; answeredBy?: string }
      facts.approvals.push({ event: event.event, tool: d.tool, outcome: d.outcome, answeredBy: d.answeredBy })
    }
  }
  return facts
}

/** a temporary workspace holding the demo's files; the caller removes it */
export async function demoWorkspace(prefix: string): Promise<string> {
  const root = await realpath(await mkdtemp(join(tmpdir(), prefix)))
  for (const [path, text] of Object.entries(DEMO_FILES)) {
    await mkdir(dirname(join(root, path)), { recursive: true })
    await writeFile(join(root, path), text)
  }
  return root
}

/** the demo's deployment over `root`: the standard plugins, one agent `main` */
export function demoDeployment(root: string, mode: 'native' | 'code' = 'code', source = 'faber demo'): DeploymentSpec {
  const spec = readDeployment({ mode, agents: [{ name: 'main' }] }, source, root)
  spec.plugins = standardStack({
    root,
    // creating or replacing a file needs approval; a standing rule allows the changelog
    approval: {
      policy: 'auto',
      require: ['write'],
      rules: [{ name: 'changelog', tool: 'write', arguments: { '$.path': '^CHANGELOG\\.md$' }, decision: 'allow' }],
    },
  })
  return spec
}

export async function runDemo(options: DemoOptions): Promise<number> {
  const out = options.output ?? process.stdout
  const { paint } = options.style
  // the demo is there to show each nested call going through the pipeline: never folded into a progress line
  const transcript = new Transcript(out, options.style, { json: options.json, maxLines: 6, verbose: true })
  const root = await demoWorkspace('faber-demo-')
  const started = performance.now()
  try {
    const spec = demoDeployment(root)
    const deployed = await compose(spec)
    const { ctx } = deployed
    const agent = deployed.agents.get('main')!
    try {
      // served before the session, so the page gets every call and program, whenever it is opened
      const view = options.web && (await ctx.inspector.serve(options.web))
      if (view) (options.json ? process.stderr : out).write(`faber demo: the live web view is at ${view.url}\n`)
      const loaded = spec.plugins.map((p) => p.use)
      if (options.json) transcript.json({ type: 'deployment', mode: 'code', agent: 'main', plugins: loaded, workspace: root, files: Object.keys(DEMO_FILES) })
      transcript.heading('the deployment')
      transcript.note(`mode code (the model is shown only run_code and a typed SDK); agent "main"`)
      transcript.note(`plugins: @faber/core, ${loaded.join(', ')}`)
      transcript.note(`workspace ${root}: ${Object.keys(DEMO_FILES).join(', ')}`)
      const wire = ctx.tools.wire(agent)
      transcript.note(`the model is shown ${wire.tools.map((t) => t.name).join(', ')}; programs can call ${ctx.tools.collapsedNames(agent).join(', ')}`)

      transcript.heading('the session (a scripted model; no network)')
      const events: SessionEvent[] = []
      const log = options.log ? await SessionLog.open(options.log) : undefined
      const session = new AgentSession(ctx, {
        log,
        // on a terminal the model takes a moment, so a person can follow; piped, it answers at once
        model: new ScriptedModel(DEMO_SCRIPT, { latencyMs: out.isTTY && !options.json ? 600 : 0 }),
        agent,
        persona: 'You are a careful coding agent working in a small TypeScript repository.',
        context: `Workspace: ${root}. Paths are relative to it.`,
        onEvent: (event) => {
          events.push(event)
          transcript.event(event)
        },
      })
      const outcome = await session.send(DEMO_USER).finally(() => log?.close())
      session.dispose()

      const { inspect, select } = await import('@faber/plugin-tool-cordis')
      const report = inspect(ctx)
      if (options.json) transcript.json({ type: 'report', report })
      transcript.heading("the inspector's view of agent main")
      transcript.note(select(report, 'tools', 'main').text)
      transcript.heading('the call trace (tool-cordis)')
      transcript.note(select(report, 'calls').text)

      const facts = collect(events)
      const after = Object.fromEntries(
        await Promise.all(['src/greet.ts', 'TODO.md', 'CHANGELOG.md'].map(async (p) => [p, await readFile(join(root, p), 'utf8').catch(() => null)])),
      )
      if (options.json) {
        transcript.json({ type: 'outcome', outcome, facts, files: after, durationMs: Math.round(performance.now() - started) })
      } else {
        transcript.heading('what happened')
        const first = facts.direct[0]
        const lines = [
          `1. the direct call of "${first?.name}" ended ${first?.code ?? 'ok'} in the core (${first?.stages.join('; ') || 'no stages'}): no policy saw it.`,
          `2. run_code made ${facts.nested.length} nested calls through the full pipeline; up to ${facts.overlapped} ran at once.`,
          ...facts.nested
            .filter((n) => !n.ok)
            .map((n) => `   - ${n.name} was refused: ${n.code}${n.by ? ` by ${n.by}` : ''}; the program caught the ToolCallError and recovered.`),
          ...facts.approvals
            .filter((a) => a.event === 'approval/decided')
            .map((a) => `   - approval for ${a.tool}: ${a.outcome} (answered by ${a.answeredBy}).`),
          `3. the turn ended ${outcome.reason} after ${outcome.steps} model calls.`,
          '',
          'src/greet.ts now reads:',
          ...(after['src/greet.ts'] ?? '(missing)')
            .trimEnd()
            .split('\n')
            .map((l: string) => `   ${l}`),
        ]
        for (const line of lines) transcript.line(line)
        transcript.line(
          paint(`\n(finished in ${((performance.now() - started) / 1000).toFixed(1)} s${options.keep ? `; workspace kept at ${root}` : ''})`, 'gray'),
        )
      }
      if (view && options.web) {
        ;(options.json ? process.stderr : out).write(`faber demo: the deployment and its live web view (${view.url}) stay until Ctrl-C\n`)
        await options.web.hold()
      }
      return outcome.reason === 'done' ? 0 : 1
    } finally {
      await deployed.stop()
    }
  } finally {
    if (!options.keep) await rm(root, { recursive: true, force: true })
  }
}
