import { mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { type Agent, assertStarted, createAgent, defineTool, type Mode, type ToolResult, t } from '@faber/core'
import { call as callTool, deployment, disposeAll, value } from '@faber/core/testing'
import * as ToolsFs from '@faber/plugin-tools-fs'
import WorkerSandbox from '@faber/sandbox'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'
import * as FsObservation from '../src/index.ts'

Logger.levels.base = 0

interface Setup {
  policy?: FsObservation.ConfigInput | false
  mode?: Mode
  sandbox?: boolean
}

let root: string
let ctx: Context

/** for each test of the calling describe: a fresh root, and whatever the test deployed stopped afterwards */
function workspace() {
  beforeEach(async () => {
    root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'faber-obs-')))
  })
  afterEach(async () => {
    await disposeAll()
    await rm(root, { recursive: true, force: true })
  })
}

async function deploy(options: Setup = {}) {
  ctx = await deployment({ mode: options.mode ?? 'native' }, (ctx) => {
    ctx.plugin(ToolsFs, { root })
    if (options.policy !== false) ctx.plugin(FsObservation, options.policy ?? {})
    // the real @faber/sandbox: nested calls go through the real run_code bridge and the whole pipeline
    if (options.sandbox) ctx.plugin(WorkerSandbox, { poolSize: 1 })
  })
  return ctx
}

const call = (name: string, args: unknown, agent?: Agent) => callTool(ctx, name, args, { agent })

/** runs a program through run_code and returns what it returned */
async function program(code: string, agent?: Agent) {
  return value(await call('run_code', { code, description: 'test program' }, agent)).result
}

const file = (rel: string) => path.join(root, rel)
const text = (rel: string) => readFile(file(rel), 'utf8')

function denial(result: ToolResult) {
  expect(result.isError, result.content).to.equal(true)
  if (!result.isError) return
  expect(result.error.code).to.equal('DENIED')
  expect(result.error.deniedBy).to.deep.equal({ stage: 'pre-execute', plugin: 'fs-observation' })
  return result.error.message
}

function stale(result: ToolResult) {
  expect(result.isError, result.content).to.equal(true)
  if (!result.isError) return
  expect(result.error.code).to.equal('TOOL_FAILED')
  expect(result.error.toolCode).to.equal('FS_STALE')
  return result.error.message
}

describe('fs-observation: deny paths', () => {
  workspace()

  it('denies an edit of a file the agent has not read, before approval is asked', async () => {
    await deploy()
    let asked = 0
    ctx.set('approval', {
      request: async () => {
        asked++
        return 'allowed'
      },
    })
    ctx.on('tools/pre-execute', () => ({ kind: 'ask', reason: 'edits need a human' }))
    await writeFile(file('a.txt'), 'hello')
    const message = denial(await call('edit', { path: 'a.txt', oldString: 'hello', newString: 'bye' }))
    expect(message).to.equal('edit requires reading "a.txt" first — read it, then retry')
    expect(asked).to.equal(0)
    expect(await text('a.txt')).to.equal('hello')
  })

  it('read then edit succeeds, and the edit counts as having seen the new content', async () => {
    await deploy()
    await writeFile(file('a.txt'), 'one two')
    value(await call('read', { path: './a.txt' }))
    value(await call('edit', { path: 'a.txt', oldString: 'one', newString: '1' }))
    value(await call('edit', { path: path.join(root, 'a.txt'), oldString: 'two', newString: '2' }))
    expect(await text('a.txt')).to.equal('1 2')
  })

  it('denies an edit of a file it saw absent', async () => {
    await deploy()
    expect((await call('read', { path: 'new.txt' })).isError).to.equal(true)
    await writeFile(file('new.txt'), 'appeared')
    expect(denial(await call('edit', { path: 'new.txt', oldString: 'appeared', newString: 'x' }))).to.equal(
      '"new.txt" did not exist when you looked, so there is nothing to edit — create it with write, or read it again if it exists now',
    )
  })

  it('lets a write create a new file without a read, and then edit it', async () => {
    await deploy()
    expect(value(await call('write', { path: 'src/new.ts', content: 'let a = 1\n' })).created).to.equal(true)
    value(await call('edit', { path: 'src/new.ts', oldString: '1', newString: '2' }))
    expect(await text('src/new.ts')).to.equal('let a = 2\n')
  })

  it('denies a write that would replace a file the agent has not read', async () => {
    await deploy()
    await writeFile(file('a.txt'), 'precious')
    expect(denial(await call('write', { path: 'a.txt', content: 'gone' }))).to.equal(
      'write would replace "a.txt", which you have not read — read it first, then retry',
    )
    expect(await text('a.txt')).to.equal('precious')
  })

  it('absent, then created by someone else: the write is denied; absent and still absent: it creates', async () => {
    await deploy()
    expect((await call('read', { path: 'a.txt' })).isError).to.equal(true)
    expect((await call('read', { path: 'b.txt' })).isError).to.equal(true)
    await writeFile(file('a.txt'), 'theirs')
    expect(denial(await call('write', { path: 'a.txt', content: 'mine' }))).to.equal('"a.txt" was created since you saw it absent — read it first, then retry')
    expect(await text('a.txt')).to.equal('theirs')
    value(await call('write', { path: 'b.txt', content: 'mine' }))
    expect(await text('b.txt')).to.equal('mine')
  })
})

describe('fs-observation: freshness', () => {
  workspace()

  it('an external change after the read makes edit and write stale', async () => {
    await deploy()
    await writeFile(file('a.txt'), 'v1')
    value(await call('read', { path: 'a.txt' }))
    await writeFile(file('a.txt'), 'v2 from elsewhere')
    const message = '"a.txt" changed since you read it — read it again, then retry'
    expect(denial(await call('edit', { path: 'a.txt', oldString: 'v2', newString: 'x' }))).to.equal(message)
    expect(denial(await call('write', { path: 'a.txt', content: 'mine' }))).to.equal(message)
    expect(await text('a.txt')).to.equal('v2 from elsewhere')
    value(await call('read', { path: 'a.txt' }))
    value(await call('write', { path: 'a.txt', content: 'mine' }))
  })

  it('asks fs/disk-version before the disk: an answer stands for the file, {} leaves it to the tool', async () => {
    await deploy()
    await writeFile(file('a.txt'), 'v1')
    await writeFile(file('b.txt'), 'on disk, but told absent')
    const read = value(await call('read', { path: 'a.txt' })) as { version: string }
    const told = new Map<string, { version?: string }>([
      [file('a.txt'), { version: 'sha256:not-what-was-read' }],
      [file('b.txt'), { version: FsObservation.ABSENT }],
    ])
    const asked: string[] = []
    ctx.on('fs/disk-version', (path) => {
      asked.push(path)
      return told.get(path)
    })
    // the disk still holds what was read: only the answer makes it stale
    const message = '"a.txt" changed since you read it — read it again, then retry'
    expect(denial(await call('edit', { path: 'a.txt', oldString: 'v1', newString: 'x' }))).to.equal(message)
    told.set(file('a.txt'), { version: read.version })
    value(await call('edit', { path: 'a.txt', oldString: 'v1', newString: 'v2' }))
    // told absent: an unread write may create it (the tool, at write time, finds it there and refuses)
    expect(stale(await call('write', { path: 'b.txt', content: 'mine' }))).to.contain('"b.txt" already exists')
    expect(asked).to.include.members([file('a.txt'), file('b.txt')])
  })

  it('without the pre-execute check, the tools still refuse the stale write at write time', async () => {
    await deploy({ policy: { checkBeforeApproval: false } })
    await writeFile(file('a.txt'), 'v1')
    await writeFile(file('b.txt'), 'unread')
    value(await call('read', { path: 'a.txt' }))
    await writeFile(file('a.txt'), 'v2')
    expect(stale(await call('write', { path: 'a.txt', content: 'mine' }))).to.contain('"a.txt" changed since you read it — read it again, then retry')
    expect(stale(await call('edit', { path: 'a.txt', oldString: 'v2', newString: 'x' }))).to.contain('changed since you read it')
    expect(stale(await call('write', { path: 'b.txt', content: 'mine' }))).to.contain('"b.txt" already exists')
    expect([await text('a.txt'), await text('b.txt')]).to.deep.equal(['v2', 'unread'])
  })

  // a pre-execute listener registered after the policy runs after its check and before the body: a change it
  // makes is a change racing between the policy's check and the write
  for (const tool of ['write', 'edit'] as const) {
    it(`a change racing between the check and the ${tool} is not overwritten`, async () => {
      await deploy()
      await writeFile(file('a.txt'), 'seen')
      value(await call('read', { path: 'a.txt' }))
      let raced = 0
      ctx.on('tools/pre-execute', async (exec) => {
        if (exec.name !== tool) return
        raced++
        await writeFile(file('a.txt'), 'racing change')
      })
      const args = tool === 'write' ? { path: 'a.txt', content: 'mine' } : { path: 'a.txt', oldString: 'racing', newString: 'mine' }
      expect(stale(await call(tool, args))).to.contain('changed since you read it')
      expect(raced).to.equal(1)
      expect(await text('a.txt')).to.equal('racing change')
    })
  }

  it('a file created between the check and a creating write is not overwritten', async () => {
    await deploy()
    ctx.on('tools/pre-execute', async (exec) => {
      if (exec.name === 'write') await writeFile(file('new.txt'), 'created elsewhere')
    })
    expect(stale(await call('write', { path: 'new.txt', content: 'mine' }))).to.contain('"new.txt" already exists')
    expect(await text('new.txt')).to.equal('created elsewhere')
  })
})

describe('fs-observation: agents and nested calls', () => {
  workspace()

  it('keeps observations per agent', async () => {
    await deploy()
    const a = createAgent(ctx, { name: 'a' })
    const b = createAgent(ctx, { name: 'b' })
    await writeFile(file('x.txt'), 'x')
    value(await call('read', { path: 'x.txt' }, a))
    expect(denial(await call('edit', { path: 'x.txt', oldString: 'x', newString: 'y' }, b))).to.contain('requires reading')
    expect(denial(await call('edit', { path: 'x.txt', oldString: 'x', newString: 'y' }))).to.contain('requires reading')
    value(await call('edit', { path: 'x.txt', oldString: 'x', newString: 'y' }, a))
  })

  it('loaded on one agent, it governs only that agent (and the others stay unguarded)', async () => {
    await deploy({ policy: false })
    const guarded = createAgent(ctx, { name: 'guarded' })
    const free = createAgent(ctx, { name: 'free' })
    guarded.ctx.plugin(FsObservation, {})
    await assertStarted(ctx)
    await writeFile(file('x.txt'), 'x')
    expect(denial(await call('edit', { path: 'x.txt', oldString: 'x', newString: 'y' }, guarded))).to.contain('requires reading')
    value(await call('edit', { path: 'x.txt', oldString: 'x', newString: 'y' }, free))
    // the free agent's write is unconditional: the guarded agent's (absent) expectation is not applied to it
    value(await call('write', { path: 'x.txt', content: 'z' }, free))
    expect(await text('x.txt')).to.equal('z')
  })

  it('nested calls in run_code satisfy and trigger the policy like direct ones, with the outer agent', async () => {
    await deploy({ mode: 'both', sandbox: true })
    const a = createAgent(ctx, { name: 'a' })
    const b = createAgent(ctx, { name: 'b' })
    await writeFile(file('x.txt'), 'alpha beta')

    const refused = await program(
      `try { await tools.edit({ path: 'x.txt', oldString: 'alpha', newString: 'A' }); return 'edited' } catch (e) { return e.message }`,
      a,
    )
    expect(refused).to.equal('edit requires reading "x.txt" first — read it, then retry')

    const edited = await program(
      `const r = await tools.read({ path: 'x.txt' }); const e = await tools.edit({ path: 'x.txt', oldString: 'alpha', newString: 'A' }); return [r.version === e.version, e.replacements]`,
      a,
    )
    expect(edited).to.deep.equal([false, 1])
    // the nested edit counted for agent a: a direct edit needs no new read; agent b has seen nothing
    value(await call('edit', { path: 'x.txt', oldString: 'beta', newString: 'B' }, a))
    expect(denial(await call('edit', { path: 'x.txt', oldString: 'A', newString: 'a' }, b))).to.contain('requires reading')
    // a direct read satisfies a nested edit
    value(await call('read', { path: 'x.txt' }, b))
    expect(await program(`return (await tools.edit({ path: 'x.txt', oldString: 'A B', newString: 'done' })).replacements`, b)).to.equal(1)
    expect(await text('x.txt')).to.equal('done')
    // and freshness holds inside programs too
    await writeFile(file('x.txt'), 'changed outside')
    expect(await program(`try { await tools.write({ path: 'x.txt', content: 'mine' }) } catch (e) { return e.message }`, b)).to.equal(
      '"x.txt" changed since you read it — read it again, then retry',
    )
  })
})

describe('fs-observation: lifecycle and configuration', () => {
  workspace()

  it('without the policy, the tools are unguarded', async () => {
    await deploy({ policy: false })
    await writeFile(file('a.txt'), 'theirs')
    value(await call('edit', { path: 'a.txt', oldString: 'theirs', newString: 'edited' }))
    value(await call('write', { path: 'a.txt', content: 'replaced unread' }))
    ctx.on('tools/pre-execute', async () => {
      await writeFile(file('a.txt'), 'racing change')
    })
    value(await call('write', { path: 'a.txt', content: 'last writer wins' }))
    expect(await text('a.txt')).to.equal('last writer wins')
  })

  it('drops what it observed when disposed; a fresh load requires reading again', async () => {
    await deploy({ policy: false })
    await writeFile(file('a.txt'), 'a')
    const fork = ctx.plugin(FsObservation, {})
    await assertStarted(ctx)
    value(await call('read', { path: 'a.txt' }))
    fork.dispose()
    ctx.plugin(FsObservation, {})
    await assertStarted(ctx)
    expect(denial(await call('edit', { path: 'a.txt', oldString: 'a', newString: 'b' }))).to.contain('requires reading')
  })

  it('governs the tool names and path argument it is configured with', async () => {
    await deploy({ policy: false })
    const notes = new Map<string, string>()
    ctx.tools.register(
      defineTool({
        name: 'note_get',
        description: 'reads a note',
        parameters: t.object({ note: t.string() }),
        output: { schema: t.object({ path: t.string(), version: t.string() }) },
        execute: ({ note }) => ({ path: note, version: `v:${notes.get(note)}` }),
      }),
    )
    ctx.tools.register(
      defineTool({
        name: 'note_put',
        description: 'changes a note',
        parameters: t.object({ note: t.string(), text: t.string() }),
        output: { schema: t.object({ path: t.string(), version: t.string() }) },
        execute: ({ note, text }) => {
          notes.set(note, text)
          return { path: note, version: `v:${text}` }
        },
      }),
    )
    ctx.plugin(FsObservation, { tools: { read: ['note_get'], write: [], edit: ['note_put'] }, pathArgument: 'note' })
    await assertStarted(ctx)
    notes.set('n1', 'hi')
    expect(denial(await call('note_put', { note: 'n1', text: 'x' }))).to.equal('note_put requires reading "n1" first — read it, then retry')
    value(await call('note_get', { note: 'n1' }))
    value(await call('note_put', { note: 'n1', text: 'x' }))
    // tools-fs under its default names is not governed by this configuration
    await writeFile(file('a.txt'), 'a')
    value(await call('edit', { path: 'a.txt', oldString: 'a', newString: 'b' }))
  })
})
