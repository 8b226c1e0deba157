// what the model is shown, measured with a real tokenizer (o200k, gpt-tokenizer): the tool listing natively and under
// Code Mode with the SDK in full, as an index, and auto (the default), for the three npm MCP servers imported through
// @faber/plugin-mcp and a generated 1,000-tool catalog; then the demo task replayed through the agent loop natively
// (one call per step) and in code mode, counting the input tokens of every model request.
// `pnpm bench prompt`. the native listing is the baseline of each row.

import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AgentSession, type Model, type ModelRequest, type ScriptedCall, ScriptedModel, type ScriptStep } from '@faber/agent'
import ToolRuntime, { type Agent, Catalog, createAgent, type JsonSchema, type SdkPresentation, type ToolDefinition } from '@faber/core'
import { Context, Logger } from 'cordis'
import { encode } from 'gpt-tokenizer/encoding/o200k_base'
import { DEMO_CHANGELOG, DEMO_SCRIPT, DEMO_USER, demoDeployment, demoWorkspace } from '../packages/cli/src/demo.ts'
import { compose } from '../packages/cli/src/deployment.ts'
import * as mcp from '../plugins/mcp/src/index.ts'
import { type ServerName, serverScript } from '../plugins/mcp/tests/fixtures/servers.ts'
import { row, timeOp } from './harness.ts'

const tokens = (text: string) => encode(text).length
const PRESENTATIONS: SdkPresentation[] = ['full', 'index', 'auto']

interface Shown {
  bytes: number
  tokens: number
}

/** what one request carries for the tools: the wire schemas as an OpenAI-style `tools` array, and the registry's prompt sections */
function shown(ctx: Context, agent: Agent): Shown {
  const wire = ctx.tools.wire(agent)
  const schemas = JSON.stringify(wire.tools.map(({ name, description, parameters }) => ({ type: 'function', function: { name, description, parameters } })))
  const text = [schemas, ...wire.sections.filter((s) => s.text).map((s) => s.text)].join('\n\n')
  return { bytes: Buffer.byteLength(text), tokens: tokens(text) }
}

/** one agent per presentation: native, then code with each SDK presentation */
function agents(ctx: Context) {
  const native = createAgent(ctx, { name: 'native' })
  native.ctx.tools.presentAs('native')
  const code: Record<string, Agent> = {}
  for (const presentation of PRESENTATIONS) {
    const agent = createAgent(ctx, { name: `code-${presentation}` })
    agent.ctx.tools.presentAs('code')
    agent.ctx.tools.presentSdk(presentation)
    code[presentation] = agent
  }
  return { native, code }
}

function measureCatalog(label: string, ctx: Context, targets: Record<string, string>) {
  const { native, code } = agents(ctx)
  const base = shown(ctx, native)
  const count = ctx.tools.collapsedNames(code.full).length
  console.log(`  ${label} (${count} tools)`)
  console.log(`    ${'presentation'.padEnd(14)} ${'bytes'.padStart(10)} ${'tokens'.padStart(9)}  tokens vs native`)
  const row = (name: string, s: Shown, target?: string) =>
    console.log(
      `    ${name.padEnd(14)} ${s.bytes.toLocaleString('en').padStart(10)} ${s.tokens.toLocaleString('en').padStart(9)}  ${(base.tokens / s.tokens).toFixed(2).padStart(6)}× fewer${target ? `   (target ${target})` : ''}`,
    )
  row('native', base)
  const figures: Record<string, number> = { tools: count, 'native.bytes': base.bytes, 'native.tokens': base.tokens }
  for (const presentation of PRESENTATIONS) {
    const s = shown(ctx, code[presentation])
    row(`code ${presentation}`, s, targets[presentation])
    figures[`${presentation}.bytes`] = s.bytes
    figures[`${presentation}.tokens`] = s.tokens
    figures[`${presentation}.fewer`] = base.tokens / s.tokens
  }
  return figures
}

export async function benchMcpCatalog() {
  Logger.levels.base = 0
  const dir = await mkdtemp(join(tmpdir(), 'faber-bench-prompt-'))
  const servers: ServerName[] = ['everything', 'filesystem', 'memory']
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  await ctx.start()
  const env = { MEMORY_FILE_PATH: join(dir, 'memory.jsonl') }
  ctx.plugin(mcp, {
    servers: servers.map((name) => ({ name, command: process.execPath, args: name === 'filesystem' ? [serverScript(name), dir] : [serverScript(name)], env })),
  })
  await ctx.lifecycle.flush()
  try {
    return measureCatalog('the three npm MCP servers (everything, filesystem, memory)', ctx, { full: '≥ 1× (no more than native)', index: '≥ 3×' })
  } finally {
    await ctx.stop()
    await rm(dir, { recursive: true, force: true })
  }
}

// a generated catalog: 20 services × 10 resources × 5 verbs, 2–6 parameters each with descriptions and constraints,
// and an output schema; the same every run
const SERVICES = ['crm', 'billing', 'support', 'hr', 'inventory', 'shipping', 'analytics', 'marketing', 'calendar', 'docs'].concat([
  'chat',
  'tickets',
  'wiki',
  'repo',
  'ci',
  'cloud',
  'dns',
  'mail',
  'storage',
  'search',
])
const RESOURCES = ['contact', 'account', 'invoice', 'order', 'product', 'note', 'task', 'event', 'report', 'user']
const VERBS = ['list', 'get', 'create', 'update', 'delete']

function generatedTool(service: string, resource: string, verb: string, i: number): ToolDefinition {
  const properties: Record<string, JsonSchema> = {
    id: { type: 'string', description: `the ${resource} id`, pattern: '^[a-z0-9-]{4,64}$' },
    limit: { type: 'integer', description: 'how many to return at most', minimum: 1, maximum: 500, default: 50 },
    cursor: { type: 'string', description: 'the cursor of the next page, from a previous answer' },
    fields: { type: 'array', items: { type: 'string' }, description: 'fields to include', minItems: 1 },
    status: { enum: ['open', 'closed', 'archived'], description: `the ${resource} status` },
    note: { type: 'string', description: 'a free-text note', maxLength: 2000 },
  }
  const names = Object.keys(properties)
  const count = 2 + (i % 5)
  const chosen = names.slice(0, count)
  return {
    name: `${service}_${resource}_${verb}`,
    description: `${verb[0].toUpperCase()}${verb.slice(1)} ${resource}s in ${service}. Requires the ${service} scope; results are paged and sorted by last change.`,
    parameters: {
      type: 'object',
      properties: Object.fromEntries(chosen.map((name) => [name, properties[name]])),
      required: verb === 'list' ? [] : ['id'],
    },
    output: {
      schema: {
        type: 'object',
        properties: {
          items: {
            type: 'array',
            items: { type: 'object', properties: { id: { type: 'string' }, name: { type: 'string' }, updatedAt: { type: 'string', format: 'date-time' } } },
          },
          next: { type: ['string', 'null'], description: 'the cursor of the next page' },
        },
        required: ['items'],
      },
    },
    execute: () => ({ items: [], next: null }),
  }
}

export function generatedCatalog() {
  const tools = []
  let i = 0
  for (const service of SERVICES) for (const resource of RESOURCES) for (const verb of VERBS) tools.push(generatedTool(service, resource, verb, i++))
  return tools
}

/** tools.$search and tools.$describe over the generated catalog, against a plain scan of the names as the baseline */
export async function benchSearch() {
  const tools = generatedCatalog().map((tool) => ({
    name: tool.name,
    description: tool.description,
    parameters: tool.parameters as JsonSchema,
    output: tool.output.schema as JsonSchema,
  }))
  const catalog = new Catalog(tools)
  const names = tools.map((tool) => tool.name)
  const scan = await timeOp(() => names.filter((name) => name.includes('invoice')), 2000)
  const search = await timeOp(() => catalog.search('create an invoice note'), 2000)
  const describe = await timeOp(() => catalog.describe(['billing_invoice_create', 'crm_contact_update', 'repo_task_list']), 2000)
  console.log(`  over ${tools.length} tools:`)
  row('names.filter(includes) (baseline)', scan, scan)
  row('tools.$search(query)', search, scan, '≤ 1 ms')
  row('tools.$describe(3 names)', describe, scan, '≤ 1 ms')
  return { scanUs: scan, searchUs: search, describeUs: describe }
}

export async function benchGeneratedCatalog() {
  Logger.levels.base = 0
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'native' })
  await ctx.start()
  for (const tool of generatedCatalog()) ctx.tools.register(tool)
  try {
    return measureCatalog('a generated catalog', ctx, { auto: '≥ 20×' })
  } finally {
    await ctx.stop()
  }
}

/** counts the input tokens of every request, then answers from the script */
class CountingModel implements Model {
  readonly name = 'counting'
  requests: number[] = []
  private inner: ScriptedModel

  constructor(script: ScriptStep[]) {
    this.inner = new ScriptedModel(script)
  }

  complete(request: ModelRequest) {
    const tools = JSON.stringify(request.tools.map(({ name, description, parameters }) => ({ type: 'function', function: { name, description, parameters } })))
    // a tool call as the model wrote it: its name and its arguments, the JSON text it generated (escaping that text
    // once more, as JSON.stringify of the call would, counts tokens the model never sees)
    const calls = (m: ModelRequest['messages'][number]) =>
      'toolCalls' in m && m.toolCalls ? m.toolCalls.map((call) => `\n${call.name} ${call.arguments}`).join('') : ''
    const messages = request.messages.map((m) => `${m.role}: ${m.content}${calls(m)}`)
    this.requests.push(tokens([tools, ...messages].join('\n')))
    return this.inner.complete(request)
  }
}

// the demo's task done natively, one tool call per model request, as a model without code would do it
const NATIVE_SCRIPT: ScriptStep[] = [
  { toolCalls: [{ name: 'read', arguments: { path: 'src/greet.ts' } }] },
  { toolCalls: [{ name: 'read', arguments: { path: 'src/config.ts' } }] },
  { toolCalls: [{ name: 'list', arguments: {} }] },
  {
    toolCalls: [
      {
        name: 'edit',
        arguments: {
          path: 'src/greet.ts',
          // biome-ignore lint/suspicious/noTemplateCurlyInString: the content of a TypeScript file
          oldString: 'export function greet(name: string) {\n  return `Hello, ${name}!`',
          newString:
            // biome-ignore lint/suspicious/noTemplateCurlyInString: the content of a TypeScript file
            "import { config } from './config.ts'\n\nexport function greet(name: string) {\n  return `${config.greeting}, ${name}${config.punctuation}`",
        },
      },
    ],
  },
  {
    toolCalls: [
      { name: 'edit', arguments: { path: 'TODO.md', oldString: '- [ ] make the greeting configurable', newString: '- [x] make the greeting configurable' } },
    ],
  },
  { toolCalls: [{ name: 'read', arguments: { path: 'TODO.md' } }] },
  {
    toolCalls: [
      { name: 'edit', arguments: { path: 'TODO.md', oldString: '- [ ] make the greeting configurable', newString: '- [x] make the greeting configurable' } },
    ],
  },
  { toolCalls: [{ name: 'write', arguments: { path: 'CHANGELOG.md', content: DEMO_CHANGELOG } }] },
  { text: 'Done: greet() uses config.greeting, the TODO item is ticked, and CHANGELOG.md exists.' },
]

async function replay(mode: 'native' | 'code', script: ScriptStep[]) {
  const root = await demoWorkspace('faber-bench-demo-')
  const deployed = await compose(demoDeployment(root, mode, 'bench'))
  const model = new CountingModel(script)
  try {
    const session = new AgentSession(deployed.ctx, {
      model,
      agent: deployed.agents.get('main'),
      persona: 'You are a careful coding agent working in a small TypeScript repository.',
      context: `Workspace: ${root}. Paths are relative to it.`,
    })
    const outcome = await session.send(DEMO_USER)
    session.dispose()
    if (outcome.reason !== 'done') throw new Error(`the ${mode} replay ended ${outcome.reason}`)
    return model.requests
  } finally {
    await deployed.stop()
    await rm(root, { recursive: true, force: true })
  }
}

/** a run_code call without the program's comment lines */
function unnarrated(call: ScriptedCall): ScriptedCall {
  const args = call.arguments as { code: string; description: string }
  return { ...call, arguments: { ...args, code: args.code.replace(/^[ \t]*\/\/.*\n/gm, '') } }
}

export async function benchDemoTask() {
  Logger.levels.base = 0
  const native = await replay('native', NATIVE_SCRIPT)
  // the task itself is the program and the summary, without the narration the demo adds for people watching (its
  // text and the program's comment lines: the native steps carry none); the demo's script also opens with a
  // deliberate direct call
  const [, program, summary] = DEMO_SCRIPT
  if (typeof program === 'function' || !program.toolCalls) throw new Error("the demo's second step is no longer its program")
  const task = await replay('code', [{ toolCalls: program.toolCalls.map(unnarrated) }, summary])
  const demo = await replay('code', DEMO_SCRIPT)
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0)
  const line = (label: string, requests: number[], target = '') =>
    console.log(
      `    ${label.padEnd(44)} ${String(requests.length).padStart(2)} requests ${sum(requests).toLocaleString('en').padStart(7)} tokens  ${(sum(native) / sum(requests)).toFixed(2)}× fewer${target}   (${requests.join(', ')})`,
    )
  console.log('  the demo task through the agent loop, input tokens over all requests')
  line('native, one call per step', native)
  line('code mode: the program and the summary', task, '   (target ≥ 4×)')
  line("code mode: the demo's script (+ a direct call)", demo)
  return { nativeTokens: sum(native), taskTokens: sum(task), demoTokens: sum(demo), taskFewer: sum(native) / sum(task), demoFewer: sum(native) / sum(demo) }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await benchMcpCatalog()
  await benchGeneratedCatalog()
  await benchSearch()
  await benchDemoTask()
  process.exit(0)
}
