import { spawn } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import { AgentSession, ScriptedModel, type ScriptStep, SessionLog } from '@faber/agent'
import { createAgent, defineTool, t } from '@faber/core'
import { call, deployment } from '@faber/core/testing'
import * as ToolsFs from '@faber/plugin-tools-fs'
import DeploymentStore, { SqliteStore } from '@faber/store'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'
import * as FsObservation from '../src/index.ts'

Logger.levels.base = 0

describe('fs-observation: a resumed session keeps what its agent read', () => {
  let dir: string
  let root: string
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'faber-resume-'))
    root = path.join(dir, 'ws')
    await import('node:fs/promises').then((fs) => fs.mkdir(root))
    await writeFile(path.join(root, 'notes.txt'), 'hello world\n')
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  /** one process's worth: a deployment with the store, a session on `log` for agent "main", one user turn */
  async function turn(log: string, script: ScriptStep[]) {
    const ctx = await deployment({}, (ctx) => {
      // a stand-in shell: any tool annotated changesFiles counts as a command
      ctx.plugin({
        name: 'shell',
        inject: ['tools'],
        apply: (ctx: Context) =>
          ctx.tools.register(
            defineTool({
              name: 'sh',
              description: 'runs nothing',
              parameters: t.object({ command: t.string() }),
              output: { schema: t.string() },
              annotations: { changesFiles: true },
              execute: () => 'ran',
            }),
          ),
      })
      ctx.plugin(DeploymentStore, { path: path.join(dir, 'faber.db') })
      ctx.plugin(ToolsFs, { root })
      ctx.plugin(FsObservation, {})
    })
    const agent = createAgent(ctx, { name: 'main' })
    const sessionLog = await SessionLog.open(log)
    const results: string[] = []
    const session = new AgentSession(ctx, {
      model: new ScriptedModel(script),
      agent,
      log: sessionLog,
      onEvent: (event) => {
        if (event.type === 'call-end') results.push(event.result.content)
      },
    })
    try {
      await session.send('go')
    } finally {
      session.dispose()
      await sessionLog.close()
      await ctx.stop()
    }
    return results
  }

  const read: ScriptStep[] = [{ toolCalls: [{ name: 'read', arguments: { path: 'notes.txt' } }] }, { text: 'read it' }]
  const edit: ScriptStep[] = [{ toolCalls: [{ name: 'edit', arguments: { path: 'notes.txt', oldString: 'world', newString: 'there' } }] }, { text: 'done' }]

  it('an edit after a restart needs no new read in the same session, and still needs one in a new session', async () => {
    const log = path.join(dir, 'session.jsonl')
    const [first] = await turn(log, read)
    expect(first).to.contain('hello world')
    // a new process resumes the log: the read it made before is known
    const [resumed] = await turn(log, edit)
    expect(resumed).to.match(/^edited notes\.txt: 1 replacement/)
    expect(await readFile(path.join(root, 'notes.txt'), 'utf8')).to.equal('hello there\n')
    // another session (another log) never read the file
    const [fresh] = await turn(path.join(dir, 'other.jsonl'), [
      { toolCalls: [{ name: 'edit', arguments: { path: 'notes.txt', oldString: 'there', newString: 'again' } }] },
      { text: 'done' },
    ])
    expect(fresh).to.contain('edit requires reading "notes.txt" first')
  })

  it('a change made while the session was away is caught: the kept observation is of the old version', async () => {
    const log = path.join(dir, 'session.jsonl')
    await turn(log, read)
    await writeFile(path.join(root, 'notes.txt'), 'hello world, changed by someone\n')
    const [resumed] = await turn(log, edit)
    expect(resumed).to.contain('"notes.txt" changed since you read it')
    expect(await readFile(path.join(root, 'notes.txt'), 'utf8')).to.equal('hello world, changed by someone\n')
  })

  it('another process holding the store past its busy timeout costs observations, not the process', async () => {
    const store = path.join(dir, 'faber.db')
    const ctx = await deployment({}, (ctx) => {
      ctx.plugin(DeploymentStore, { path: store, busyTimeout: 50 })
      ctx.plugin(ToolsFs, { root })
      ctx.plugin(FsObservation, {})
    })
    const agent = createAgent(ctx, { name: 'main' })
    ctx.emit('agent/session', { agent, id: 'held', resumed: false })
    let warned!: (text: string) => void
    const warning = new Promise<string>((resolve) => (warned = resolve))
    const target = {
      levels: { base: 2 },
      record: (r: { type: string; content: string }) => r.type === 'warn' && r.content.includes('not saved') && warned(r.content),
    }
    Logger.targets.push(target as never)
    // the other process: takes the write lock, says so, and keeps it until its stdin closes
    const sqlite = createRequire(import.meta.resolve('@faber/store')).resolve('better-sqlite3')
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const db = new (require(${JSON.stringify(sqlite)}))(${JSON.stringify(store)}); db.exec('BEGIN IMMEDIATE'); console.log('held'); process.stdin.on('end', () => { db.exec('COMMIT'); console.log('released') }).resume()`,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    )
    const said = (line: string) => new Promise<void>((resolve) => holder.stdout.on('data', (chunk: Buffer) => chunk.toString().includes(line) && resolve()))
    try {
      await said('held')
      expect((await call(ctx, 'read', { path: 'notes.txt' }, { agent })).isError).to.equal(false)
      expect(await warning).to.match(
        /^1 observation\(s\) were not saved to .*faber\.db \(a resumed session reads those files again\): the store .*faber\.db cannot be used: database is locked$/,
      )
      const released = said('released')
      holder.stdin.end()
      await released
      // the process went on, and what it reads now is kept
      expect((await call(ctx, 'read', { path: 'notes.txt' }, { agent })).isError).to.equal(false)
      const connection = ctx.store.connection
      await ctx.stop()
      // cordis disposes plugins without waiting for them: the store closes once the last flush committed
      while (connection.open) await new Promise((resolve) => setTimeout(resolve, 5))
      const kept = new SqliteStore(store)
      try {
        expect(kept.db.prepare("SELECT path FROM fs_observations WHERE session = 'held'").pluck().all()).to.deep.equal(['notes.txt'])
      } finally {
        await kept.close()
      }
    } finally {
      Logger.targets.splice(Logger.targets.indexOf(target as never), 1)
      holder.kill()
    }
  })

  it('a command after the read makes the kept observation worthless, across a restart too', async () => {
    const log = path.join(dir, 'session.jsonl')
    await turn(log, [
      { toolCalls: [{ name: 'read', arguments: { path: 'notes.txt' } }] },
      { toolCalls: [{ name: 'sh', arguments: { command: 'true' } }] },
      { text: 'ran it' },
    ])
    const [resumed] = await turn(log, edit)
    expect(resumed).to.contain('edit requires reading "notes.txt" first')
    expect(await readFile(path.join(root, 'notes.txt'), 'utf8')).to.equal('hello world\n')
  })
})
