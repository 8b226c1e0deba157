import { spawn } from 'node:child_process'
import { createWriteStream } from 'node:fs'
import { appendFile, mkdir, mkdtemp, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AgentSession, ScriptedModel, type ScriptStep, SessionLog } from '@faber/agent'
import { openStore, PostgresCopy, type StoreLocation } from '@faber/store'
import { type Cluster, requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'
import { type Context, Logger } from 'cordis'
import {
  compose,
  createStyle,
  type DeploymentSpec,
  loadDeploymentFile,
  ReplayInputError,
  type ReplayReport,
  readDeployment,
  renderReplay,
  replay,
  replayExitCode,
} from '../src/index.ts'
import { BIN, faber, faberPty, faberReaderGone, stampPlugin, tree } from './helpers.ts'

Logger.levels.base = 0

let dir: string
const bodies: string[] = []
/** how many questions the person below was asked */
let asked: number

/** the stamp tool's bodies that ran */
const Stamp = stampPlugin(bodies)

/** `spec` with an answerer standing for a person at a terminal: it allows whatever it is asked (kept as `remember` says), and counts */
function withPerson(spec: DeploymentSpec, remember?: 'session' | 'always'): DeploymentSpec {
  const Person = {
    name: 'person',
    replay: 'inert',
    apply: (ctx: Context) =>
      ctx.on('approval/request', () => {
        asked++
        return remember ? { decision: 'allow' as const, remember } : { decision: 'allow' as const }
      }),
  }
  spec.plugins.push({ key: 'person', use: 'person', config: {}, plugin: Person })
  return spec
}

/** a deployment over `${dir}/ws`: tools-fs, fs-observation, the stamp tool, and what `extra` adds */
function deployment(extra: Record<string, unknown> = {}, mode = 'native'): DeploymentSpec {
  const spec = readDeployment({ mode, agents: [{ name: 'main' }], plugins: { '@faber/plugin-tools-fs': { root: join(dir, 'ws') }, ...extra } }, 'test.yml', dir)
  spec.plugins.push({ key: 'stamp', use: 'stamp', config: { file: join(dir, 'ws', 'stamps.txt') }, plugin: Stamp })
  if (mode !== 'native') spec.plugins.unshift({ key: '@faber/sandbox', use: '@faber/sandbox', config: {} })
  return spec
}

/** plays `script` on `spec` with a real agent session, logging to `name`; returns the log's path */
async function record(spec: DeploymentSpec, script: ScriptStep[], name = 'session.jsonl'): Promise<string> {
  const path = join(dir, name)
  const deployed = await compose(spec)
  const log = await SessionLog.open(path)
  try {
    const session = new AgentSession(deployed.ctx, { model: new ScriptedModel(script), agent: deployed.agents.get('main'), log })
    await session.send('go')
    session.dispose()
  } finally {
    await log.close()
    await deployed.stop()
  }
  return path
}

const calls = (...steps: { name: string; arguments: unknown }[][]): ScriptStep[] => [...steps.map((toolCalls) => ({ toolCalls })), { text: 'done' }]

/** the log with each record passed through `fn` (which may drop it, or return forged text) */
async function rewrite(path: string, fn: (record: Record<string, unknown>) => Record<string, unknown> | string | undefined) {
  const lines = (await readFile(path, 'utf8')).split('\n').filter(Boolean)
  const out = lines.map((line) => fn(JSON.parse(line))).filter((r) => r !== undefined)
  await writeFile(path, `${out.map((r) => (typeof r === 'string' ? r : JSON.stringify(r))).join('\n')}\n`)
}

function changes(report: ReplayReport) {
  return report.changes.map((c) => [c.name, c.old.verdict, c.new.verdict, c.new.plugin])
}

describe('faber replay', function () {
  this.timeout(60_000)
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-replay-'))
    await mkdir(join(dir, 'ws'))
    await writeFile(join(dir, 'ws', 'notes.txt'), 'hello\n')
    bodies.length = 0
    asked = 0
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  describe('decisions', () => {
    it('the same deployment changes nothing, and no body runs', async () => {
      const spec = deployment({ '@faber/plugin-fs-observation': {} })
      const log = await record(spec, calls([{ name: 'read', arguments: { path: 'notes.txt' } }], [{ name: 'stamp', arguments: { text: 'a' } }]))
      expect(bodies).to.deep.equal(['a'])
      const report = await replay([log], spec)
      expect(report.summary).to.include({ replayed: 2, unchanged: 2, changed: 0 })
      expect(replayExitCode(report)).to.equal(0)
      expect(bodies).to.deep.equal(['a'])
    })

    it('a new guard rule: the call is newly denied, by the plugin and stage that decided, with its reason', async () => {
      const log = await record(deployment(), calls([{ name: 'stamp', arguments: { text: 'rm -rf /' } }], [{ name: 'stamp', arguments: { text: 'ok' } }]))
      const tightened = deployment({
        '@faber/plugin-guards': { deny: [{ name: 'no-rm', tools: ['stamp'], argument: '$.text', pattern: '^rm ', reason: 'no rm' }] },
      })
      const report = await replay([log], tightened)
      expect(changes(report)).to.deep.equal([['stamp', 'allow', 'deny', 'guards']])
      const [change] = report.changes
      expect(change).to.include({ turn: 1, agent: 'main', arguments: '{"text":"rm -rf /"}' })
      expect(change.new.reason).to.contain('no rm')
      expect(report.summary).to.include({ replayed: 2, unchanged: 1, newlyDenied: 1, newlyAllowed: 0 })
      expect(report.summary.byPlugin).to.deep.equal({ guards: { denied: 1, asked: 0 } })
      expect(report.summary.byTool.stamp).to.include({ replayed: 2, changed: 1, newlyDenied: 1 })
      expect(replayExitCode(report)).to.equal(0)
    })

    it('a loosened policy: a call that was denied would now run, and the exit code says so', async () => {
      const strict = deployment({ '@faber/plugin-guards': { deny: [{ tools: ['stamp'], reason: 'no stamps' }] } })
      const log = await record(strict, calls([{ name: 'stamp', arguments: { text: 'x' } }]))
      const report = await replay([log], deployment())
      expect(changes(report)).to.deep.equal([['stamp', 'deny', 'allow', undefined]])
      expect(report.changes[0].old).to.include({ stage: 'pre-execute', plugin: 'guards' })
      expect(report.morePermissive).to.equal(true)
      expect(replayExitCode(report)).to.equal(1)
      expect(bodies).to.deep.equal([])
    })

    it('a direct call code mode refused would run in native mode: newly allowed, and the exit code says so', async () => {
      const log = await record(deployment({}, 'code'), calls([{ name: 'stamp', arguments: { text: 'direct' } }]))
      expect(bodies).to.deep.equal([])
      const same = await replay([log], deployment({}, 'code'))
      expect(same.summary).to.include({ replayed: 1, unchanged: 1 })
      expect(replayExitCode(same)).to.equal(0)
      const native = await replay([log], deployment())
      expect(changes(native)).to.deep.equal([['stamp', 'error', 'allow', undefined]])
      expect(native.changes[0].old).to.include({ code: 'UNKNOWN_TOOL', plugin: 'core' })
      expect(native.summary).to.include({ newlyAllowed: 1 })
      expect(native.morePermissive).to.equal(true)
      expect(replayExitCode(native)).to.equal(1)
      expect(renderReplay(native, createStyle(false))).to.contain('More permissive')
      expect(bodies).to.deep.equal([])
    })

    it('a call denied on both sides by another plugin: a change, reported with the new decider, but not newly denied', async () => {
      const log = await record(
        deployment({ '@faber/plugin-guards': { deny: [{ tools: ['stamp'], reason: 'no stamps' }] } }),
        calls([{ name: 'stamp', arguments: { text: 'x' } }]),
      )
      const report = await replay([log], deployment({ '@faber/plugin-approval': { rules: [{ tool: 'stamp', decision: 'reject' }] } }))
      expect(changes(report)).to.deep.equal([['stamp', 'deny', 'deny', 'approval']])
      expect(report.changes[0].old).to.include({ plugin: 'guards' })
      expect(report.summary).to.include({ replayed: 1, changed: 1, newlyDenied: 0, newlyAllowed: 0, newlyAsked: 0 })
      expect(report.summary.byTool.stamp).to.include({ changed: 1, newlyDenied: 0 })
      expect(report.summary.byPlugin).to.deep.equal({ approval: { denied: 1, asked: 0 } })
      expect(replayExitCode(report)).to.equal(0)
    })

    it('approval: rules and grants answer; a question for a person is reported as ask, never asked', async () => {
      const rules = { policy: 'ask', require: ['stamp'], rules: [{ tool: 'stamp', decision: 'allow' }] }
      const log = await record(deployment({ '@faber/plugin-approval': rules }), calls([{ name: 'stamp', arguments: { text: 'x' } }]))
      const spec = withPerson(deployment({ '@faber/plugin-approval': { policy: 'ask', require: ['stamp'] } }))
      const report = await replay([log], spec)
      expect(changes(report)).to.deep.equal([['stamp', 'allow', 'ask', 'approval']])
      expect(report.summary).to.include({ newlyAsked: 1 })
      expect(asked).to.equal(0)
      expect(replayExitCode(report)).to.equal(0)
    })

    it('a call a person answered in the recording is an ask on both sides: unchanged', async () => {
      const spec = withPerson(deployment({ '@faber/plugin-approval': { policy: 'ask', require: ['stamp'] } }))
      const log = await record(spec, calls([{ name: 'stamp', arguments: { text: 'x' } }]))
      expect(asked).to.equal(1)
      const report = await replay([log], spec)
      expect(report.summary).to.include({ replayed: 1, unchanged: 1, changed: 0 })
      expect(asked).to.equal(1)
      // the same recording through a deployment whose rules now allow it: the person is no longer needed
      const ruled = deployment({ '@faber/plugin-approval': { policy: 'ask', require: ['stamp'], rules: [{ tool: 'stamp', decision: 'allow' }] } })
      const loosened = await replay([log], ruled)
      expect(changes(loosened)).to.deep.equal([['stamp', 'ask', 'allow', undefined]])
      expect(loosened.changes[0].old).to.include({ stage: 'approval', plugin: 'person' })
      expect(replayExitCode(loosened)).to.equal(1)
    })

    it("a person's answer kept for the session or for good is kept in the replay too: the calls after it find the grant the recorded ones did", async () => {
      for (const remember of ['session', 'always'] as const) {
        const spec = withPerson(
          deployment({
            '@faber/store': { path: join(dir, 'state', `${remember}.db`) },
            '@faber/plugin-approval': { policy: 'ask', require: ['stamp'] },
          }),
          remember,
        )
        asked = 0
        const stamps = calls(
          [{ name: 'stamp', arguments: { text: 'x' } }],
          [{ name: 'stamp', arguments: { text: 'y' } }],
          [{ name: 'stamp', arguments: { text: 'z' } }],
        )
        const log = await record(spec, stamps, `${remember}.jsonl`)
        expect(asked, remember).to.equal(1)
        const before = await tree(dir)
        // the same policy: nothing changes. (before, the calls the session grant allowed were newly asked, and the first
        // call, whose person's answer made the grant kept in the store, was ask → allow: more permissive, exit 1)
        const report = await replay([log], spec)
        expect(report.summary, remember).to.include({ replayed: 3, unchanged: 3, changed: 0 })
        expect(replayExitCode(report), remember).to.equal(0)
        expect(asked, remember).to.equal(1)
        expect(await tree(dir), remember).to.deep.equal(before)
      }
    })

    it('calls recorded in the MCP sessions of one server are replayed each in its own conversation, as they ran', async () => {
      const read = { name: 'read', arguments: { path: 'notes.txt' } }
      const log = await record(deployment({ '@faber/plugin-guards': { breaker: { remindAfter: 0, blockAfter: 0 } } }), calls(...Array(6).fill([read])))
      // what faber mcp --session-log writes for two clients' sessions (each call record names its MCP session): taking turns
      let n = 0
      await rewrite(log, (record) => (record.type === 'call' ? { ...record, session: n++ % 2 ? 'b' : 'a' } : record))
      // the repeat-call breaker counts per conversation: three in a row in each session, none blocked at four
      const report = await replay([log], deployment({ '@faber/plugin-guards': { breaker: { remindAfter: 0, blockAfter: 4 } } }))
      expect(report.summary).to.include({ replayed: 6, unchanged: 6, changed: 0 })
      // the same calls in one conversation: the fourth, fifth and sixth in a row are blocked
      await rewrite(log, ({ session, ...record }) => record)
      const one = await replay([log], deployment({ '@faber/plugin-guards': { breaker: { remindAfter: 0, blockAfter: 4 } } }))
      expect(one.summary).to.include({ replayed: 6, newlyDenied: 3 })
    })

    it('a tool the deployment does not have, and an agent it does not define, are reported as unknown', async () => {
      const log = await record(deployment(), calls([{ name: 'stamp', arguments: { text: 'x' } }]))
      const without = readDeployment({ agents: [{ name: 'main' }] }, 'bare.yml', dir)
      const report = await replay([log], without)
      expect(changes(report)).to.deep.equal([['stamp', 'allow', 'unknown', 'core']])
      expect(report.summary.unknown).to.equal(1)
      const other = readDeployment({ agents: [{ name: 'other' }] }, 'other.yml', dir)
      const elsewhere = await replay([log], other)
      expect(elsewhere.changes[0].new.reason).to.contain('no agent named "main"')
    })

    it('replays nested calls under their run_code, in recorded order, with the program line the log gives', async () => {
      const code = "await tools.read({ path: 'notes.txt' })\nawait tools.stamp({ text: 'inner' })\nreturn 1"
      const spec = deployment({}, 'code')
      const log = await record(spec, calls([{ name: 'run_code', arguments: { code, description: 'two calls' } }]))
      expect(bodies).to.deep.equal(['inner'])
      // the runtime recorded where in the program each nested call was made
      const sites = (await readFile(log, 'utf8')).split('\n').filter((line) => line.includes('"nested-call"'))
      expect(sites.map((line) => JSON.parse(line).site?.line)).to.deep.equal([1, 2])
      const report = await replay([log], deployment({ '@faber/plugin-guards': { deny: [{ tools: ['stamp'], reason: 'no stamps' }] } }, 'code'))
      expect(changes(report)).to.deep.equal([['stamp', 'allow', 'deny', 'guards']])
      const site = JSON.parse(sites[1]).site
      expect(report.changes[0].within).to.deep.equal({ callId: 'call_1', line: 2, column: site.column, source: "await tools.stamp({ text: 'inner' })" })
      expect(report.summary.replayed).to.equal(3)
      const refused = await replay([log], deployment({ '@faber/plugin-guards': { deny: [{ tools: ['run_code'], reason: 'no programs' }] } }, 'code'))
      expect(changes(refused)).to.deep.equal([['run_code', 'allow', 'deny', 'guards']])
      expect(refused.changes[0].notReached).to.equal(2)
      expect(bodies).to.deep.equal(['inner'])
    })

    it('a program checkpointed while it waited and run again after a resume is replayed once, with the calls of both runs', async () => {
      const ok = (value: unknown) => ({ isError: false, value, durationMs: 1 })
      const records = [
        { type: 'session', version: 3, id: 's', agent: 'main', model: 'm' },
        { type: 'turn', turn: 1 },
        { type: 'call', turn: 1, step: 1, call: { id: 'run1', name: 'run_code', arguments: '{"code":"return 1","description":"stamps"}' }, mode: 'exclusive' },
        { type: 'nested-call', turn: 1, outerCallId: 'run1', callId: 'run1/1', name: 'stamp', arguments: { text: 'a' } },
        { type: 'nested-result', turn: 1, outerCallId: 'run1', callId: 'run1/1', name: 'stamp', content: '', ...ok({ stamped: 'a' }) },
        { type: 'nested-call', turn: 1, outerCallId: 'run1', callId: 'run1/2', name: 'stamp', arguments: { text: 'b' } },
        { type: 'checkpoint', turn: 1, outerCallId: 'run1', calls: [{ callId: 'run1/1', name: 'stamp', arguments: '{"text":"a"}' }], values: [], sequence: 2 },
        // the process was killed; another resumed the session and ran the program again
        { type: 'resume', turns: 1 },
        { type: 'nested-call', turn: 1, outerCallId: 'run1', callId: 'run1/3', name: 'stamp', arguments: { text: 'b' } },
        { type: 'nested-result', turn: 1, outerCallId: 'run1', callId: 'run1/3', name: 'stamp', content: '', ...ok({ stamped: 'b' }) },
        { type: 'result', turn: 1, callId: 'run1', name: 'run_code', ...ok({ logs: [], result: 1 }) },
        { type: 'model', turn: 1, step: 2, model: 'm', durationMs: 1 },
      ]
      const log = join(dir, 'resumed.jsonl')
      await writeFile(log, records.map((r) => `${JSON.stringify({ ...r, at: 1 })}\n`).join(''))
      const report = await replay([log], deployment({ '@faber/plugin-guards': { deny: [{ tools: ['stamp'], reason: 'no stamps' }] } }, 'code'))
      // run1/2 never finished (the program was made again as run1/3): not replayed
      expect(report.summary).to.include({ replayed: 3, newlyDenied: 2, unrecorded: 1 })
      expect(report.changes.map((c) => [c.name, c.callId, c.within?.callId])).to.deep.equal([
        ['stamp', 'run1/1', 'run1'],
        ['stamp', 'run1/3', 'run1'],
      ])
      expect(report.logs[0].unknownRecords).to.deep.equal({})
    })

    it("fs-observation's read history comes from the recorded calls, not the disk of today", async () => {
      const spec = deployment({ '@faber/plugin-fs-observation': {} })
      const log = await record(
        spec,
        calls([{ name: 'read', arguments: { path: 'notes.txt' } }], [{ name: 'edit', arguments: { path: 'notes.txt', oldString: 'hello', newString: 'bye' } }]),
      )
      // the disk has moved on since: a check against it would call the edit stale
      await writeFile(join(dir, 'ws', 'notes.txt'), 'changed again, elsewhere\n')
      const report = await replay([log], spec)
      expect(report.summary).to.include({ replayed: 2, unchanged: 2 })
      // and the history is rebuilt in order: without the read, the edit is refused
      const read = (record: Record<string, unknown>) =>
        (record.call as { name?: string })?.name === 'read' || record.name === 'read' || (record.message as { name?: string })?.name === 'read'
      await rewrite(log, (record) => (read(record) ? undefined : record))
      const unread = await replay([log], spec)
      expect(changes(unread)).to.deep.equal([['edit', 'allow', 'deny', 'fs-observation']])
    })
  })

  describe('processes', () => {
    const edit = calls([{ name: 'edit', arguments: { path: 'notes.txt', oldString: 'hello', newString: 'bye' } }])
    const read = calls([{ name: 'read', arguments: { path: 'notes.txt' } }])

    it('a resumed log replays each process afresh: what a plugin held in memory is gone after the resume', async () => {
      const spec = deployment({ '@faber/plugin-fs-observation': {} })
      await record(spec, read)
      // a new process continues the log: its fs-observation has seen no read, so the edit is refused
      const log = await record(spec, edit)
      expect((await readFile(log, 'utf8')).match(/"type":"resume"/g)).to.have.length(1)
      const report = await replay([log], spec)
      expect(report.summary).to.include({ replayed: 2, unchanged: 2, changed: 0 })
    })

    it('and what it kept in the store is still there, as it was for the recorded session', async () => {
      const spec = deployment({ '@faber/store': { path: join(dir, 'state', 'faber.db') }, '@faber/plugin-fs-observation': {} })
      await record(spec, read)
      // the store gave the resumed session back its read: the edit went through
      const log = await record(spec, edit)
      expect(bodies).to.deep.equal([])
      const report = await replay([log], spec)
      expect(report.summary).to.include({ replayed: 2, unchanged: 2, changed: 0 })
      // without the read in the log, the replay's own store copy has nothing for the session: the edit is refused
      await rewrite(log, (record) => ((record.call as { name?: string })?.name === 'read' || record.name === 'read' ? undefined : record))
      const unread = await replay([log], spec)
      expect(changes(unread)).to.deep.equal([['edit', 'allow', 'deny', 'fs-observation']])
    })

    it('each recorded user turn is told (agent/turn): per-turn limits start again at it, as they did', async () => {
      const log = await record(deployment(), calls(...Array(4).fill([{ name: 'read', arguments: { path: 'notes.txt' } }])))
      // the last two calls in a second user turn
      let n = 0
      await rewrite(log, (record) => {
        if (record.type === 'call' && ++n === 3) return `${JSON.stringify({ type: 'turn', turn: 2, at: 1 })}\n${JSON.stringify({ ...record, turn: 2 })}`
        return n >= 3 && typeof record.turn === 'number' ? { ...record, turn: 2 } : record
      })
      const limited = deployment({ '@faber/plugin-guards': { rateLimits: [{ tools: ['read'], perTurn: 2 }] } })
      expect((await replay([log], limited)).summary).to.include({ replayed: 4, unchanged: 4 })
      // the same four calls in one turn: the third and fourth are over the limit
      await rewrite(log, (record) => (record.type === 'turn' && record.turn === 2 ? undefined : record))
      expect((await replay([log], limited)).summary).to.include({ replayed: 4, newlyDenied: 2 })
    })

    it('a process that did nothing is not composed: a log forged with many resume records costs no deployment each', async () => {
      const spec = deployment({ '@faber/plugin-fs-observation': {} })
      let composed = 0
      spec.plugins.push({ key: 'counter', use: 'counter', config: {}, plugin: { name: 'counter', replay: 'inert', apply: () => void composed++ } })
      await record(spec, read)
      const log = await record(spec, edit)
      composed = 0
      expect((await replay([log], spec)).summary).to.include({ replayed: 2, unchanged: 2 })
      expect(composed).to.equal(2)
      // 1,000 processes that opened the log and did nothing, before the one that made the edit
      const lines = (await readFile(log, 'utf8')).split('\n').filter(Boolean)
      const at = lines.findIndex((line) => line.includes('"type":"resume"'))
      lines.splice(at, 0, ...Array(1000).fill(lines[at]))
      await writeFile(log, `${lines.join('\n')}\n`)
      composed = 0
      expect((await replay([log], spec)).summary).to.include({ replayed: 2, unchanged: 2 })
      expect(composed).to.equal(2)
      // nor 1,000 that each began a turn and made no call
      lines.splice(at, 0, ...Array.from({ length: 1000 }, (_, i) => [lines[at], JSON.stringify({ type: 'turn', turn: 2 + i, at: 1 })]).flat())
      await writeFile(log, `${lines.join('\n')}\n`)
      composed = 0
      expect((await replay([log], spec)).summary).to.include({ replayed: 2, unchanged: 2 })
      expect(composed).to.equal(2)
    })
  })

  /**
   * the same case on each kind of store: a read, a write and a stamp recorded on a deployment that keeps its state in
   * the store, a grant for the stamp kept there afterwards, then a replay without the approval rule: the stamp is
   * allowed by the grant, the write newly asked, no body runs, and `state()` (files, rows) is the same after
   */
  async function storeCase<T>(location: StoreLocation, state: () => Promise<T>): Promise<T> {
    const spec = (approval: object) =>
      deployment({
        '@faber/store': location,
        '@faber/plugin-fs-observation': {},
        '@faber/plugin-approval': { policy: 'ask', require: ['write', 'stamp'], ...approval },
      })
    const log = await record(
      spec({ rules: [{ tool: '*', decision: 'allow' }] }),
      calls(
        [{ name: 'read', arguments: { path: 'notes.txt' } }],
        [{ name: 'write', arguments: { path: 'notes.txt', content: 'new\n' } }],
        [{ name: 'stamp', arguments: { text: 'x' } }],
      ),
    )
    // a persisted grant the replay should honour, and must not touch
    const store = await openStore(location)
    await store.run('INSERT INTO approval_grants (id, tool, decision, created_at) VALUES (?, ?, ?, ?)', ['g1', 'stamp', 'allow', '2026-01-01T00:00:00.000Z'])
    await store.close()
    const before = await state()
    const report = await replay([log], spec({}))
    expect(changes(report)).to.deep.equal([['write', 'allow', 'ask', 'approval']])
    expect(await state()).to.deep.equal(before)
    expect(bodies).to.deep.equal(['x'])
    return before
  }

  describe('read-only', () => {
    it('writes nothing: no file, no store row, no grant, whatever the tools and stores would write', async () => {
      await storeCase({ path: join(dir, 'state', 'faber.db') }, () => tree(dir))
    })
  })

  describe('a PostgreSQL store', () => {
    let cluster: Cluster
    let url: string
    before(async function () {
      this.timeout(120_000)
      cluster = await requirePostgres(this)
    })
    beforeEach(async () => {
      url = await cluster.database()
    })

    /** every row of every table of the database, in order (read as the replay reads it: on a read-only connection) */
    async function dump(): Promise<Record<string, string[]>> {
      const reader = new PostgresCopy(url)
      try {
        const out: Record<string, string[]> = {}
        const tables =
          (await reader.read<{ name: string }>("SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")) ?? []
        for (const { name } of tables) out[name] = ((await reader.read(`SELECT * FROM "${name}"`)) ?? []).map((row) => JSON.stringify(row)).sort()
        return out
      } finally {
        await reader.close()
      }
    }

    it("is read over a connection the server keeps read-only: its grants answer, the replay's writes stay in memory", async () => {
      const before = await storeCase({ url }, dump)
      expect(before.fs_observations).to.have.length(1)
    })

    it('the server refuses any write on the connection the copy reads on', async () => {
      const copy = new PostgresCopy(url)
      try {
        expect(await copy.read('SELECT 1 AS one')).to.deep.equal([{ one: 1 }])
        const write = await copy.read('CREATE TABLE intruder (a int)').catch((error) => error)
        expect(write.message).to.match(/cannot execute CREATE TABLE in a read-only transaction/)
        // each read is a READ ONLY transaction of its own, whatever the session's default says
        await copy.read('SET default_transaction_read_only = off')
        const again = await copy.read('CREATE TABLE intruder (a int)').catch((error) => error)
        expect(again.message).to.match(/read-only transaction/)
      } finally {
        await copy.close()
      }
      expect(await dump()).to.deep.equal({})
    })
  })

  describe('hostile logs', () => {
    let log: string
    beforeEach(async () => {
      log = await record(deployment(), calls([{ name: 'stamp', arguments: { text: 'x' } }]))
    })

    /** `text` as the log (the log as it is when undefined) is refused with an error matching `pattern` */
    async function refused(text: string | undefined, pattern: RegExp) {
      if (text !== undefined) await writeFile(log, text)
      let error: unknown
      try {
        await replay([log], deployment())
      } catch (caught) {
        error = caught
      }
      expect(error).to.be.instanceOf(ReplayInputError)
      expect((error as Error).message).to.match(pattern)
    }

    it('a torn last line is reported and left out; a broken line before it is refused by line', async () => {
      const text = await readFile(log, 'utf8')
      await writeFile(log, `${text}{"type":"call","turn":2,"ca`)
      const report = await replay([log], deployment())
      expect(report.logs[0].truncated?.line).to.equal(text.split('\n').length)
      expect(report.summary.replayed).to.equal(1)
      const lines = text.split('\n')
      await refused([lines[0], 'not json', ...lines.slice(1)].join('\n'), /:2: not a log record .*corrupted/)
    })

    it('reads a LOG_VERSION 2 log as it reads 3; refuses an older or newer one by name, and forged records with a clear error', async () => {
      const text = await readFile(log, 'utf8')
      await writeFile(log, text.replace('"version":3', '"version":2'))
      expect((await replay([log], deployment())).summary).to.include({ replayed: 1, unchanged: 1 })
      await refused(text.replace('"version":3', '"version":1'), /LOG_VERSION 1, which records no result values.*record the session again/)
      await refused(text.replace('"version":3', '"version":7'), /LOG_VERSION 7, which this Faber \(LOG_VERSION 3\) does not know/)
      await writeFile(log, text)
      await rewrite(log, (record) => (record.type === 'call' ? { ...record, call: { id: 1 } } : record))
      await refused(await readFile(log, 'utf8'), /a call record without call/)
      await refused(text.replace(/^\{"type":"session"[^\n]*\n/, '{"type":"turn","turn":1}\n'), /before the log's session record/)
      await refused('', /no session record/)
      let missing: unknown
      await replay([join(dir, 'none.jsonl')], deployment()).catch((error) => (missing = error))
      expect((missing as Error).message).to.match(/none\.jsonl: cannot read the log \(ENOENT\)/)
    })

    it('counts record types it does not know, and reads __proto__ keys and 10,000-deep arguments as data', async () => {
      const deep = `${'['.repeat(10_000)}${']'.repeat(10_000)}`
      await rewrite(log, (record) => {
        if (record.type === 'turn') return `${JSON.stringify(record).slice(0, -1)},"__proto__":{"polluted":true}}`
        if (record.type !== 'call') return record
        const call = record.call as Record<string, unknown>
        return { ...record, call: { ...call, arguments: `{"__proto__":{"polluted":true},"text":"x","deep":${deep}}` } }
      })
      await appendFile(log, '{"type":"audit","turn":1,"at":1}\n{"type":"audit","turn":1,"at":2}\n')
      const report = await replay([log], deployment())
      expect(report.logs[0].unknownRecords).to.deep.equal({ audit: 2 })
      expect(({} as Record<string, unknown>).polluted).to.equal(undefined)
      // the recorded call ran; now its arguments are refused before any policy: reported, not a crash
      expect(changes(report)).to.deep.equal([['stamp', 'allow', 'error', 'core']])
      expect(report.changes[0].new.code).to.equal('INVALID_ARGUMENTS')
    })

    it('a run_code with 10,000 nested calls replays them all; calls nested 10,000 deep are refused, naming the line', async () => {
      const code = "await tools.stamp({ text: 'inner' })\nreturn 1"
      const program = await record(deployment({}, 'code'), calls([{ name: 'run_code', arguments: { code, description: 'one call' } }]), 'nested.jsonl')
      const text = await readFile(program, 'utf8')
      const lines = text.split('\n').filter(Boolean)
      const call = lines.findIndex((line) => line.includes('"type":"nested-call"'))
      const result = lines.findIndex((line) => line.includes('"type":"nested-result"'))
      const [nestedCall, nestedResult] = [JSON.parse(lines[call]), JSON.parse(lines[result])]
      const rest = lines.filter((_, index) => index !== call && index !== result)
      const at = rest.findIndex((line) => line.includes('"type":"result"'))
      // flat: 10,000 calls the one program made
      const flat = Array.from({ length: 10_000 }, (_, i) => [
        JSON.stringify({ ...nestedCall, callId: `n${i}` }),
        JSON.stringify({ ...nestedResult, callId: `n${i}` }),
      ]).flat()
      await writeFile(log, `${[...rest.slice(0, at), ...flat, ...rest.slice(at)].join('\n')}\n`)
      const told: number[] = []
      const report = await replay([log], deployment({ '@faber/plugin-guards': { deny: [{ tools: ['stamp'], reason: 'no stamps' }] } }, 'code'), {
        onProgress: ({ calls }) => told.push(calls),
      })
      expect(report.summary).to.include({ replayed: 10_001, newlyDenied: 10_000 })
      // the progress counts the nested calls as they are replayed, as the summary does (it was told once, 1 call, at the end)
      expect(told.length).to.equal(10_001)
      expect(told.at(-1)).to.equal(10_001)
      expect(bodies).to.deep.equal(['x', 'inner'])
      // deep: each call made by the one before it, which no program can do: refused at the second, by line
      const deep = Array.from({ length: 10_000 }, (_, i) =>
        JSON.stringify({ ...nestedCall, callId: `d${i}`, outerCallId: i ? `d${i - 1}` : nestedCall.outerCallId }),
      )
      await refused(
        `${[...rest.slice(0, at), ...deep, ...rest.slice(at)].join('\n')}\n`,
        new RegExp(`:${at + 2}: a nested call whose run_code \\(outerCallId\\) is not a call of this step`),
      )
    })

    it('a 100 MB log is streamed to a report', async () => {
      // a session whose turns say a lot (10,000 messages of 10 kB) around the recorded call: the log is read a line at a
      // time, never whole
      const [head, ...tail] = (await readFile(log, 'utf8')).split('\n').filter(Boolean)
      const out = createWriteStream(log)
      const write = (line: string) => (out.write(`${line}\n`) ? undefined : new Promise<void>((resolve) => out.once('drain', () => resolve())))
      await write(head)
      const said = JSON.stringify({ type: 'message', turn: 1, message: { role: 'assistant', content: 'x'.repeat(10_000) }, at: 1 })
      for (let i = 0; i < 10_000; i++) await write(said)
      for (const line of tail) await write(line)
      await new Promise<void>((resolve) => out.end(resolve))
      expect((await stat(log)).size).to.be.greaterThan(100_000_000)
      const report = await replay([log], deployment())
      expect(report.summary).to.include({ replayed: 1, unchanged: 1 })
      expect(report.logs[0]).to.include({ sessions: 1, directCalls: 1 })
    })

    it('a line longer than any string can hold (600 MB, no line break) is refused naming it, not a crash', async () => {
      // the session record, then 600 MB of zeros: a sparse file, made at once
      const [head] = (await readFile(log, 'utf8')).split('\n')
      await writeFile(log, `${head}\n`)
      await truncate(log, 600 * 1024 * 1024)
      // (node's readline gathered the line in one string, past the longest v8 makes: an uncaught RangeError)
      await refused(undefined, /:2: a line of more than 268435456 characters, longer than any record Faber writes/)
    })

    it('tools named __proto__ or constructor are counted as data; a call left without a result is counted, not replayed', async () => {
      const named = (name: string) => (record: Record<string, unknown>) => {
        if (record.type === 'call') return { ...record, call: { ...(record.call as object), name } }
        if (record.type === 'result') return { ...record, name }
        return record
      }
      const text = await readFile(log, 'utf8')
      await rewrite(log, named('__proto__'))
      const other = join(dir, 'other.jsonl')
      await writeFile(other, text)
      await rewrite(other, named('constructor'))
      const report = await replay([log, other], deployment())
      expect(changes(report)).to.deep.equal([
        ['__proto__', 'allow', 'unknown', 'core'],
        ['constructor', 'allow', 'unknown', 'core'],
      ])
      expect(Object.keys(report.summary.byTool)).to.deep.equal(['__proto__', 'constructor'])
      expect(report.summary.byTool.constructor).to.include({ replayed: 1, changed: 1 })
      expect(Object.getOwnPropertyNames(Object.prototype)).to.not.include('replayed')
      expect(Object.hasOwn(Object, 'replayed')).to.equal(false)
      // the session stopped before the call's result was written
      await writeFile(log, text)
      await rewrite(log, (record) => (record.type === 'result' ? undefined : record))
      const cut = await replay([log], deployment())
      expect(cut.summary).to.include({ replayed: 0, unrecorded: 1 })
    })
  })

  describe('the command', () => {
    // the deployment files the commands are given: tools-fs, and with a guard that denies reads
    let open: string
    let strict: string
    beforeEach(async () => {
      open = join(dir, 'open.yml')
      strict = join(dir, 'strict.yml')
      await writeFile(open, `agents: [{ name: main }]\nplugins:\n  '@faber/plugin-tools-fs': { root: '${join(dir, 'ws')}' }\n`)
      await writeFile(strict, `${await readFile(open, 'utf8')}  '@faber/plugin-guards': { deny: [{ tools: [read], reason: no reads }] }\n`)
    })

    it('--web prints the report, then serves it with the view of the replayed deployment until Ctrl-C', async () => {
      const spec = await loadDeploymentFile(open)
      const log = await record(spec, calls([{ name: 'read', arguments: { path: 'notes.txt' } }]))
      const child = spawn(process.execPath, [BIN, 'replay', log, '--with', strict, '--json', '--web', '0'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      })
      let stdout = ''
      let stderr = ''
      child.stdout.on('data', (chunk) => (stdout += chunk))
      const exited = new Promise<number | null>((resolve) => child.on('close', resolve))
      const url = await new Promise<string>((resolve, reject) => {
        child.stderr.on('data', (chunk) => {
          stderr += chunk
          const found = /the live web view is at (http:\/\/\S+)/.exec(stderr)
          if (found) resolve(found[1])
        })
        exited.then((code) => reject(new Error(`exited with ${code}: ${stderr}`)))
      })
      try {
        const served = (await (await fetch(new URL('api/replay', url))).json()) as ReplayReport
        expect(served).to.deep.equal(JSON.parse(stdout))
        expect(served.summary).to.include({ newlyDenied: 1 })
        // the view's own report is the replayed deployment's: its trace holds the replayed call and its denial
        const report = (await (await fetch(new URL('api/report', url))).json()) as { report: { plugins: unknown } }
        expect(JSON.stringify(report.report.plugins)).to.contain('guards')
      } finally {
        child.kill('SIGINT')
      }
      expect(await exited).to.equal(0)
    })

    it('a long log shows a progress line on a terminal, none when piped', async () => {
      const spec = await loadDeploymentFile(open)
      const one = await record(spec, calls([{ name: 'read', arguments: { path: 'notes.txt' } }]))
      // the recorded turn, 1,200 times, each with call ids of its own
      const [head, ...turn] = (await readFile(one, 'utf8')).split('\n').filter(Boolean)
      const lines = [head]
      for (let n = 1; n <= 1200; n++) for (const line of turn) lines.push(line.replaceAll('"turn":1', `"turn":${n}`).replaceAll('call_1_0', `call_${n}`))
      const log = join(dir, 'long.jsonl')
      await writeFile(log, `${lines.join('\n')}\n`)
      const pty = faberPty(['replay', log, '--with', open])
      try {
        expect(await pty.exited).to.equal(0)
      } finally {
        pty.kill()
      }
      expect(pty.output).to.match(/replaying: 1000 calls, \d+% of the log\(s\)/)
      expect(pty.output).to.contain('1200 replayed, 1200 unchanged')
      const piped = await faber(['replay', log, '--with', open])
      expect(piped.code).to.equal(0)
      expect(piped.stderr).to.not.contain('replaying:')
      expect(piped.stdout).to.contain('1200 replayed, 1200 unchanged')
    })

    it("shows a log's control characters instead of sending them to the terminal, in the report and in its errors", async () => {
      const spec = await loadDeploymentFile(open)
      const log = await record(spec, calls([{ name: 'read', arguments: { path: 'notes.txt' } }], [{ name: 'list', arguments: {} }]))
      // a forged log (or a model's own text) holding what a terminal would obey: retitle it, clear it, move over lines
      await rewrite(log, (record) => {
        if (record.type === 'session') return { ...record, id: 's\x1b]0;retitled\x07\x1b[2J\r\nNothing became more permissive.' }
        const call = record.call as { name: string; arguments: string } | undefined
        if (record.type === 'call' && call?.name === 'read') return { ...record, call: { ...call, arguments: '{"path":"notes.txt","x":"\u009b2J"}' } }
        if (call?.name === 'list') return { ...record, call: { ...call, name: 'list\x1b[1A\x1b[2K' } }
        if (record.type === 'result' && record.name === 'list') return { ...record, name: 'list\x1b[1A\x1b[2K' }
        return record
      })
      await appendFile(log, `${JSON.stringify({ type: 'note\x1b[31m', at: 1 })}\n`)
      const shown = await faber(['replay', log, '--with', strict])
      expect(shown.code, shown.stderr).to.equal(0)
      // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
      const control = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/
      expect(shown.stdout).to.not.match(control)
      expect(shown.stdout)
        .to.contain('session s\\x1b]0;retitled\\x07\\x1b[2J\\x0d\\x0aNothing became more permissive.')
        .and.contain('\\x9b2J')
        .and.contain('list\\x1b[1A\\x1b[2K')
        .and.contain('note\\x1b[31m ×1')
      // the same from code, in colour: every escape left is one the style painted
      const report = await replay([log], readDeployment({ agents: [{ name: 'main' }], plugins: {} }, 'none.yml', dir))
      // and a nested call's program line, as the log gives it
      report.changes[0].within = { callId: 'call_1\x1b[2J', line: 1, source: 'await tools.read(p) // \x1b[2J\x1b[H' }
      const painted = renderReplay(report, createStyle(true))
      expect(painted).to.contain('line 1: await tools.read(p) // \\x1b[2J\\x1b[H')
      // biome-ignore lint/suspicious/noControlCharactersInRegex: the style's own escapes, taken out
      expect(painted.replace(/\x1b\[\d+m/g, '')).to.not.match(control)
      // a broken line before the last is refused naming it, and shown as it is
      const lines = (await readFile(log, 'utf8')).split('\n')
      await writeFile(log, [lines[0], '\x1b]0;retitled\x07\x1b[2Jjunk', ...lines.slice(1)].join('\n'))
      const refused = await faber(['replay', log, '--with', strict])
      expect(refused.code).to.equal(2)
      expect(refused.stderr).to.contain(':2: not a log record (\\x1b]0;retitled\\x07\\x1b[2Jjunk)').and.not.match(control)
    })

    it('a reader that stops reading early (faber replay … | head) leaves the exit code the report gives', async () => {
      const read = calls([{ name: 'read', arguments: { path: 'notes.txt' } }])
      const cases = [
        { log: await record(await loadDeploymentFile(open), read, 'open.jsonl'), through: strict, code: 0 },
        { log: await record(await loadDeploymentFile(strict), read, 'strict.jsonl'), through: open, code: 1 },
      ]
      for (const { log, through, code } of cases) {
        const ran = await faberReaderGone(['replay', log, '--with', through])
        expect(ran.stderr, through).to.not.contain('EPIPE')
        expect(ran.code, through).to.equal(code)
      }
    })

    it('exit codes 0, 1 and 2, and --json byte-identical across runs', async () => {
      const spec = await loadDeploymentFile(open)
      const log = await record(spec, calls([{ name: 'read', arguments: { path: 'notes.txt' } }]))
      const same = await faber(['replay', log, '--with', open])
      expect(same.code, same.stderr).to.equal(0)
      expect(same.stdout).to.contain('1 replayed, 1 unchanged').and.contain('Nothing became more permissive')
      const first = await faber(['replay', log, '--with', strict, '--json'])
      const second = await faber(['replay', log, '--with', strict, '--json'])
      expect(first.code).to.equal(0)
      expect(first.stdout).to.equal(second.stdout)
      expect(JSON.parse(first.stdout).summary).to.include({ newlyDenied: 1 })
      const strictLog = join(dir, 'strict.jsonl')
      await record(await loadDeploymentFile(strict), calls([{ name: 'read', arguments: { path: 'notes.txt' } }]), 'strict.jsonl')
      const loosened = await faber(['replay', strictLog, '--with', open])
      expect(loosened.code).to.equal(1)
      expect(loosened.stdout).to.contain('deny → allow').and.contain('More permissive')
      await writeFile(join(dir, 'bad.jsonl'), '{"type":"session","version":1,"id":"x","model":"m","at":1}\n')
      const bad = await faber(['replay', join(dir, 'bad.jsonl'), '--with', open])
      expect(bad.code).to.equal(2)
      expect(bad.stderr).to.contain('LOG_VERSION 1')
      const usage = await faber(['replay', log])
      expect(usage.code).to.equal(2)
      expect(usage.stderr).to.contain('--with <deployment.yml> is required')
    })
  })
})
