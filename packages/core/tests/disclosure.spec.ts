// progressive disclosure: how the SDK is presented (full, index, auto) per deployment and per agent, and what
// tools.$search / tools.$describe answer; all limited to what the agent can see.

import { Catalog, CODE_ONLY_SECTION, createAgent, defineTool, SDK_SECTION, type SdkTool, t } from '@faber/core'
import { deployment, disposeAll } from '@faber/core/testing'
import { expect } from 'chai'
import type { Context } from 'cordis'
import { describeTools, renderIndex, summaryOf } from '../src/sdk.ts'
import './helpers.ts'

function register(ctx: Context, name: string, description: string, extra: Record<string, ReturnType<typeof t.string>> = {}) {
  return ctx.tools.register(
    defineTool({
      name,
      description,
      parameters: t.object({ path: t.string().describe('where'), ...extra }),
      output: { schema: t.object({ ok: t.boolean() }) },
      execute: () => ({ ok: true }),
    }),
  )
}

const sdkText = (ctx: Context, agent?: ReturnType<typeof createAgent>) => ctx.tools.wire(agent).sections.find((s) => s.id === SDK_SECTION)!.text

describe('SDK presentation', () => {
  afterEach(disposeAll)

  it('auto shows every declaration while they fit the budget, then an index, then names only', async () => {
    const ctx = await deployment({ mode: 'code' })
    register(ctx, 'fs_read', 'Read a file. Returns its text.')
    register(ctx, 'fs_write', 'Write a file. Creates it when missing.')
    expect(sdkText(ctx)).to.include('```ts').and.include('fs_read(args: ')
    const small = await deployment({ mode: 'code', sdkBudget: 200 })
    const more = ' Returns its text, whole, as one string.'.repeat(20)
    register(small, 'fs_read', `Read a file.${more}`)
    register(small, 'fs_write', `Write a file.${more}`)
    const index = sdkText(small)
    expect(index).to.include('an index').and.include('fs:\nfs_read(path) Read a file.\nfs_write(path) Write a file.')
    expect(index).not.to.include('Returns its text')
    expect(index).to.include('`ToolCallError` carries the `code` and `toolName`')
    const tiny = await deployment({ mode: 'code', sdkBudget: 1 })
    register(tiny, 'fs_read', 'Read a file.')
    register(tiny, 'fs_write', 'Write a file.')
    expect(sdkText(tiny)).to.include('fs (2): fs_read, fs_write')
  })

  it('shows tools.$search and tools.$describe, with their answers, where the prompt is an index', async () => {
    const rule = (ctx: Context) => ctx.tools.wire().sections.find((s) => s.id === CODE_ONLY_SECTION)!.text
    const discovery = "`await tools.$search('what you need', limit?)` returns `{ name, summary }[]`"
    for (const sdk of ['index', 'full'] as const) {
      const ctx = await deployment({ mode: 'code', sdk } as never)
      register(ctx, 'read', 'Read a file.')
      // under code the rule says it once; a full SDK declares every tool, so the helpers would add nothing there
      expect(rule(ctx).includes(discovery), sdk).to.equal(sdk === 'index')
      expect(sdkText(ctx)).not.to.include('$search')
      expect(ctx.tools.sdkDeclarations()).to.include('  $search(query: string, limit?: number)')
    }
    // under both there is no rule: the index says it
    const both = await deployment({ mode: 'both', sdk: 'index' } as never)
    register(both, 'read', 'Read a file.')
    expect(sdkText(both)).to.include(discovery)
  })

  it('is auto by default: full below sdkBudget, an index above', async () => {
    const ctx = await deployment({ mode: 'code' })
    register(ctx, 'fs_read', 'Read a file.')
    expect(sdkText(ctx)).to.include('```ts')
    // well past the default budget of 6,000 estimated tokens
    for (let i = 0; i < 60; i++) register(ctx, `bulk_${i}`, `Bulk tool ${i}. ${'More words about it. '.repeat(25)}`)
    expect(sdkText(ctx)).to.include('an index').and.include('bulk_7(path) Bulk tool 7.')
  })

  it("the code-only rule names the route through run_code, with a task tool's call as its example", async () => {
    const ctx = await deployment({ mode: 'code' })
    const tool = (name: string, readOnly: boolean, parameters: ReturnType<typeof t.object>) =>
      ctx.tools.register(defineTool({ name, description: name, parameters, annotations: { readOnly }, output: { schema: t.boolean() }, execute: () => true }))
    tool('cordis_inspect', true, t.object({ what: t.string().optional() }))
    tool('append', false, t.object({ path: t.string(), text: t.string() }))
    tool('read', true, t.object({ path: t.string(), limit: t.integer().optional() }))
    tool('stat', true, t.object({ path: t.string(), deep: t.boolean() }))
    const rule = ctx.tools.wire().sections.find((s) => s.id === CODE_ONLY_SECTION)!.text
    expect(rule).to.include("Call tools only inside a `run_code` program, e.g. `await tools.read({ path: '...' })`")
    expect(rule).to.include('fails with UNKNOWN_TOOL')
  })

  it('is set per deployment and per agent, the nearest presentSdk winning', async () => {
    const ctx = await deployment({ mode: 'code', sdk: 'index' } as never)
    register(ctx, 'read', 'Read a file.')
    const parent = createAgent(ctx, { name: 'parent' })
    const child = createAgent(ctx, { name: 'child', parent })
    expect(sdkText(ctx)).to.include('an index')
    const dispose = parent.ctx.tools.presentSdk('full')
    expect(sdkText(ctx, child)).to.include('```ts')
    child.ctx.tools.presentSdk('index')
    expect(sdkText(ctx, child)).to.include('an index')
    expect(sdkText(ctx, parent)).to.include('```ts')
    dispose()
    expect(sdkText(ctx, parent)).to.include('an index')
    expect(() => ctx.tools.presentSdk('full')).to.throw(/agent-scoped/)
    expect(() => parent.ctx.tools.presentSdk('tiny' as never)).to.throw(/"full", "index" or "auto"/)
  })

  it('is byte-identical across registration orders and runs', async () => {
    const names = ['b_two', 'a_one', 'c_three', 'a_four', 'b_five']
    const texts = new Set<string>()
    for (const order of [names, [...names].reverse(), [names[2], names[0], names[4], names[1], names[3]]]) {
      for (const sdk of ['full', 'index', 'auto'] as const) {
        const ctx = await deployment({ mode: 'code', sdk })
        for (const name of order) register(ctx, name, `Tool ${name}. More words.`)
        texts.add(
          `${sdk}\n${ctx.tools
            .wire()
            .sections.map((s) => s.text)
            .join('\n')}`,
        )
      }
    }
    expect(texts.size).to.equal(3)
  })
})

describe('the catalog behind tools.$search and tools.$describe', () => {
  const tools: SdkTool[] = [
    {
      name: 'read_file',
      description: 'Read the complete contents of a file. Use head or tail for part of it.',
      parameters: { type: 'object', properties: { path: { type: 'string' } } },
      output: {},
    },
    { name: 'write_file', description: 'Create or overwrite a file.', parameters: { type: 'object', properties: { path: { type: 'string' } } }, output: {} },
    {
      name: 'search_files',
      description: 'Find files by name pattern.',
      parameters: { type: 'object', properties: { pattern: { type: 'string' } } },
      output: {},
    },
    {
      name: 'create_issue',
      description: 'Open an issue in the tracker.',
      parameters: { type: 'object', properties: { title: { type: 'string' } } },
      output: {},
    },
  ]

  it('ranks by name, then description and arguments, ties by name', () => {
    const catalog = new Catalog(tools)
    expect(catalog.search('read file').map((hit) => hit.name)).to.deep.equal(['read_file', 'search_files', 'write_file'])
    expect(catalog.search('issue')[0]).to.deep.equal({ name: 'create_issue', summary: 'Open an issue in the tracker.' })
    expect(catalog.search('pattern')[0].name).to.equal('search_files')
    expect(catalog.search('read file', 1)).to.have.length(1)
    expect(catalog.search('zebra')).to.deep.equal([])
  })

  it('describes completely and names the nearest tools for a wrong name', () => {
    const catalog = new Catalog(tools)
    const described = catalog.describe(['read_file'])
    expect(described).to.deep.equal({ ok: true, text: describeTools([tools[0]]) })
    expect(described.ok && described.text).to.include('Use head or tail for part of it.')
    expect(catalog.describe(['reed_file'])).to.deep.equal({ ok: false, message: 'tools.$describe: `reed_file` is not a tool; did you mean `read_file`?' })
  })

  it('summarises with the first sentence, and an index gives names, arguments and summaries', () => {
    expect(summaryOf('Read a file. Then more.')).to.equal('Read a file.')
    expect(summaryOf(`${'long '.repeat(60)}end`))
      .to.have.length(160)
      .and.match(/…$/)
    expect(renderIndex(tools)).to.equal(
      'other:\ncreate_issue(title?) Open an issue in the tracker.\nread_file(path?) Read the complete contents of a file.\nsearch_files(pattern?) Find files by name pattern.\nwrite_file(path?) Create or overwrite a file.\n',
    )
  })

  it("groups an index by MCP server, then by a shared first name segment, the rest last under 'other'", () => {
    const named = (name: string): SdkTool => ({ name, description: `${name} it.`, parameters: {}, output: {} })
    const set = ['memory__read_graph', 'fs_write', 'solo', 'memory__add', 'fs_read', 'web-get'].map(named)
    expect(renderIndex(set, 'names')).to.equal('fs (2): fs_read, fs_write\nmemory (2): memory__add, memory__read_graph\nother (2): solo, web-get\n')
    expect(renderIndex(set)).to.include('memory:\nmemory__add() memory__add it.\nmemory__read_graph() memory__read_graph it.\n')
  })

  it('finds one tool among 1,000 (bench/prompt.ts times it)', () => {
    const many: SdkTool[] = Array.from({ length: 1000 }, (_, i) => ({
      name: `svc${i % 20}_thing${i}`,
      description: `Does thing ${i}.`,
      parameters: {},
      output: {},
    }))
    const catalog = new Catalog(many)
    expect(catalog.search('thing 42')[0].name).to.equal('svc2_thing42')
  })
})

describe('results sized for a model', () => {
  afterEach(disposeAll)

  it('renders values as compact JSON and cuts content at resultChars with a note', async () => {
    const ctx = await deployment({ resultChars: 1000 })
    ctx.tools.register(
      defineTool({
        name: 'big',
        description: 'returns n items',
        parameters: t.object({ n: t.integer() }),
        output: { schema: t.array(t.object({ i: t.integer() })) },
        execute: ({ n }) => Array.from({ length: n }, (_, i) => ({ i })),
      }),
    )
    const run = (n: number) => ctx.tools.execute({ callId: `c${n}`, name: 'big', arguments: { n }, signal: new AbortController().signal })
    expect((await run(2)).content).to.equal('[{"i":0},{"i":1}]')
    const big = await run(500)
    expect(big.isError).to.equal(false)
    expect(big.content.startsWith('[{"i":0},')).to.equal(true)
    expect(big.content).to.match(/\n\[cut: the last \d+ of \d+ characters were left out \(results are capped at 1000\)\. Ask for less/)
    expect(big.content.split('\n[cut')[0]).to.have.length(1000)
    // the value itself is whole: programs get all of it
    expect(!big.isError && (big.value as unknown[]).length).to.equal(500)
  })
})
