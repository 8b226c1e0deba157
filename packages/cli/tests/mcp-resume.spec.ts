// `faber mcp --session-log` killed while a client's run_code program waits on a person, then started again on the same
// log: the client calls run_code again with the same arguments (over stdio its pending call died with the process; over
// --http its MCP session did), and the server runs the program again from the log. the body it ran before the wait
// (a stamp appended to a file) runs once; the call it waited on gets the answer given meanwhile (`faber grants answer`
// or `faber grants import` into the shared store, or given to a server killed before the body ran), or asks the person
// again. real `faber mcp` processes killed with SIGKILL, real SDK clients

import { appendFile, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { type CallToolResult, ElicitRequestSchema, type ElicitResult } from '@modelcontextprotocol/sdk/types.js'
import { expect } from 'chai'
import { BIN, checkpointing, faber, jsonLines, type Serving, serving } from './helpers.ts'

const CORE = pathToFileURL(join(import.meta.dirname, '../../core/src/index.ts')).href

// a tool whose body appends its text to a file: the file's lines count the bodies that ran (one whose text starts with
// "hang" never returns); with `killOn`, the process kills itself (SIGKILL) when that event is emitted
const STAMP = `import { appendFile } from 'node:fs/promises'
import { defineTool, t } from '${CORE}'
export default {
  name: 'stamp',
  replay: 'inert',
  apply(ctx, config) {
    if (config.killOn) ctx.on(config.killOn, () => process.kill(process.pid, 'SIGKILL'))
    ctx.tools.register(defineTool({
      name: 'stamp',
      description: 'appends a line to a file',
      parameters: t.object({ text: t.string() }),
      output: { schema: t.object({ stamped: t.string() }) },
      execute: async ({ text }) => {
        await appendFile(config.file, text + '\\n')
        // a body still running when its process is killed
        if (text.startsWith('hang')) await new Promise(() => {})
        return { stamped: text }
      },
    }))
  },
}
`

const PROGRAM = {
  code: `const a = await tools.stamp({ text: 'before the wait' })
const b = await tools.write({ path: 'out.txt', content: 'approved' })
return [a.stamped, b.path]`,
  description: 'stamps, then writes out.txt',
}

const DONE = { logs: [], result: ['before the wait', 'out.txt'] }

function deployment(backend: string, stamp = '') {
  return `${checkpointing(backend)}  './stamp.mjs': { file: '\${dir}/stamps.txt'${stamp} }
  '@faber/plugin-approval': { require: [write], except: [], grantWatchMs: 50 }
`
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** a person who never answers: the program waits until it is checkpointed */
const NEVER = 'never' as const

type Person = ElicitResult | typeof NEVER | undefined

function text(result: unknown) {
  return (result as CallToolResult).content.map((part) => (part.type === 'text' ? part.text : '')).join('\n')
}

for (const backend of ['@faber/sandbox', '@faber/sandbox-isolate']) {
  describe(`faber mcp --session-log runs a checkpointed program again after a restart: ${backend}`, function () {
    this.timeout(120_000)
    let dir: string
    let log: string
    let store: string
    const clients: Client[] = []
    /** the --http servers: killed after each test */
    const servers: Serving[] = []

    beforeEach(async () => {
      dir = await mkdtemp(join(tmpdir(), 'faber-mcp-resume-'))
      log = join(dir, 'session.jsonl')
      store = join(dir, 'faber.db')
      await mkdir(join(dir, 'ws'))
      await writeFile(join(dir, 'stamp.mjs'), STAMP)
      await writeFile(join(dir, 'deploy.yml'), deployment(backend))
    })
    afterEach(async () => {
      await Promise.all(clients.splice(0).map((client) => client.close().catch(() => {})))
      for (const server of servers.splice(0)) server.child.kill('SIGKILL')
      await rm(dir, { recursive: true, force: true })
    })

    /** an SDK client whose person answers elicitations with `person` (asked: their messages); none without one */
    function client(person: Person) {
      const client = new Client({ name: 'test', version: '1.0.0' }, { capabilities: person ? { elicitation: {} } : {} })
      const asked: string[] = []
      if (person)
        client.setRequestHandler(ElicitRequestSchema, (request) => {
          asked.push(request.params.message)
          return person === NEVER ? new Promise<ElicitResult>(() => {}) : person
        })
      clients.push(client)
      return Object.assign(client, { asked })
    }

    /** `faber mcp` on stdio with a client: its pid (to kill it) and what it wrote to stderr */
    async function overStdio(person: Person, deploy = 'deploy.yml') {
      const transport = new StdioClientTransport({
        command: process.execPath,
        args: [BIN, 'mcp', join(dir, deploy), '--session-log', log],
        stderr: 'pipe',
      })
      let stderr = ''
      transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
      const connected = client(person)
      await connected.connect(transport)
      return Object.assign(connected, { pid: transport.pid!, stderr: () => stderr })
    }

    const records = async () => jsonLines(await readFile(log, 'utf8'))
    const stamps = async () => (await readFile(join(dir, 'stamps.txt'), 'utf8')).split('\n').filter(Boolean)
    const pending = async () => JSON.parse((await faber(['grants', 'pending', '--store', store, '--json'])).stdout) as { id: string; tool: string }[]

    /** called `count` times with the program; they wait on a person who never answers until checkpointed; then SIGKILL */
    async function killedWhileWaiting(count = 1, inStore = false, program = PROGRAM) {
      const first = await overStdio(NEVER)
      const calls = Array.from({ length: count }, () => first.callTool({ name: 'run_code', arguments: program }).catch((error: Error) => error))
      while ((await readFile(log, 'utf8').catch(() => '')).split('"type":"checkpoint"').length <= count) await sleep(20)
      // the question is kept in the store once it waited grantWatchMs, for `faber grants answer`
      if (inStore) while ((await pending()).length < count) await sleep(50)
      process.kill(first.pid, 'SIGKILL')
      for (const call of await Promise.all(calls)) expect(call, 'the pending tools/call dies with the server').to.be.instanceOf(Error)
      expect(await stamps()).to.deep.equal(Array(count).fill('before the wait'))
      const written = await stat(join(dir, 'ws', 'out.txt')).catch(() => undefined)
      expect(written, 'out.txt waits for the answer').to.equal(undefined)
      return (await records()).filter((r) => r.type === 'call').map((r) => r.call.id as string)
    }

    /** the program's one result, its body before the wait run once, out.txt written, no question left */
    async function expectResumed(callId: string) {
      expect(await stamps(), 'the stamp made before the wait is not made again').to.deep.equal(['before the wait'])
      expect(await readFile(join(dir, 'ws', 'out.txt'), 'utf8')).to.equal('approved')
      const all = await records()
      const results = all.filter((r) => r.type === 'result' && r.callId === callId)
      expect(results).to.have.length(1)
      expect(results[0]).to.deep.include({ isError: false, value: DONE })
      const nested = all.filter((r) => r.type === 'nested-result' && r.outerCallId === callId && !r.isError).map((r) => r.name)
      expect(nested, 'each nested call has one result in the log').to.deep.equal(['stamp', 'write'])
      expect(await pending(), 'no question is left in the store').to.deep.equal([])
    }

    it('answered in the store while it was down (faber grants answer): the same run_code again gets its result', async () => {
      const [callId] = await killedWhileWaiting(1, true)
      const [question] = await pending()
      expect(question.tool).to.equal('write')
      expect((await faber(['grants', 'answer', question.id, 'allow', '--store', store])).code).to.equal(0)
      // a client that would decline: the answer given meanwhile is the one that counts
      const second = await overStdio({ action: 'decline' })
      const result = await second.callTool({ name: 'run_code', arguments: PROGRAM })
      expect(result.isError, text(result)).to.not.equal(true)
      expect(text(result)).to.include('out.txt')
      expect(second.asked, 'nobody is asked again').to.deep.equal([])
      expect(second.stderr()).to.contain(`holds 1 run_code program(s) checkpointed while waiting on a person (${callId})`)
      await expectResumed(callId)
      const decided = (await records()).filter((r) => r.event === 'approval/decided')
      expect(decided.at(-1)?.detail).to.include({ outcome: 'allowed', answeredBy: 'approval-store' })
    })

    it('killed again while the resumed program runs a body: a third server does not run the program again, and says what may have run', async () => {
      const program = { ...PROGRAM, code: PROGRAM.code.replace('return', "await tools.stamp({ text: 'hang after the wait' })\nreturn") }
      const [callId] = await killedWhileWaiting(1, false, program)
      const second = await overStdio({ action: 'accept', content: { approve: true } })
      const call = second.callTool({ name: 'run_code', arguments: program }).catch((error: Error) => error)
      while ((await stamps()).length < 2) await sleep(20)
      process.kill(second.pid, 'SIGKILL')
      expect(await call).to.be.instanceOf(Error)
      const third = await overStdio(undefined)
      const result = await third.callTool({ name: 'run_code', arguments: program })
      expect(result.isError).to.equal(true)
      expect(text(result)).to.include('run_code failed (interrupted)').and.include('tools.stamp({"text":"hang after the wait"})')
      expect(await stamps(), 'no body ran twice').to.deep.equal(['before the wait', 'hang after the wait'])
      expect(await readFile(join(dir, 'ws', 'out.txt'), 'utf8')).to.equal('approved')
      const results = (await records()).filter((r) => r.type === 'result' && r.callId === callId)
      expect(results).to.have.length(1)
      expect(results[0]).to.include({ isError: true, code: 'CODE_RUN_FAILED' })
    })

    it('killed right after the restarted server took the answer, before the body it waited on ran: a third server keeps the answer, each body runs once', async () => {
      const [callId] = await killedWhileWaiting(1, true)
      // the second server kills itself the moment its person's answer is decided
      await writeFile(join(dir, 'kill.yml'), deployment(backend, ", killOn: 'approval/decided'"))
      const second = await overStdio({ action: 'accept', content: { approve: true } }, 'kill.yml')
      expect(await second.callTool({ name: 'run_code', arguments: PROGRAM }).catch((error: Error) => error)).to.be.instanceOf(Error)
      expect(second.asked).to.have.length(1)
      expect(await stat(join(dir, 'ws', 'out.txt')).catch(() => undefined), 'killed before the write').to.equal(undefined)
      // a third server whose client would decline: the answer given to the second is the one that counts
      const third = await overStdio({ action: 'decline' })
      const result = await third.callTool({ name: 'run_code', arguments: PROGRAM })
      expect(result.isError, text(result)).to.not.equal(true)
      expect(third.asked, 'nobody is asked again').to.deep.equal([])
      await expectResumed(callId)
      const decided = (await records()).filter((r) => r.event === 'approval/decided')
      expect(decided.at(-1)?.detail).to.include({ outcome: 'allowed', answeredBy: 'approval-store' })
    })

    if (backend !== '@faber/sandbox') return

    it('a grant imported while it was down (faber grants import): the same run_code again finds it, each body runs once', async () => {
      const [callId] = await killedWhileWaiting(1, true)
      const grants = join(dir, 'grants.json')
      const grant = { tool: 'write', arguments: { '$.path': '^out\\.txt$' }, decision: 'allow', by: 'ops' }
      await writeFile(grants, JSON.stringify({ version: 1, grants: [grant] }))
      expect((await faber(['grants', 'import', grants, '--store', store])).code).to.equal(0)
      // a client that would decline: the grant imported meanwhile is what allows the call
      const second = await overStdio({ action: 'decline' })
      const result = await second.callTool({ name: 'run_code', arguments: PROGRAM })
      expect(result.isError, text(result)).to.not.equal(true)
      expect(second.asked, 'nobody is asked again').to.deep.equal([])
      await expectResumed(callId)
      const decided = (await records()).filter((r) => r.event === 'approval/decided')
      expect(decided.at(-1)?.detail).to.include({ outcome: 'allowed', answeredBy: 'approval-rules' })
    })

    it('restarted between the answer and the resume, its log torn: the answer is not lost, and nothing runs twice', async () => {
      const [callId] = await killedWhileWaiting(1, true)
      const [question] = await pending()
      expect((await faber(['grants', 'answer', question.id, 'allow', '--store', store])).code).to.equal(0)
      // a server that starts on the log and is killed before any client calls run_code again
      const between = await overStdio(undefined)
      await between.listTools()
      process.kill(between.pid, 'SIGKILL')
      await sleep(100)
      // as a kill in the middle of a write leaves it
      await appendFile(log, '{"type":"journal","turn":0,"outerCa')
      const third = await overStdio(undefined)
      const result = await third.callTool({ name: 'run_code', arguments: PROGRAM })
      expect(result.isError, text(result)).to.not.equal(true)
      expect(third.stderr()).to.match(/its last line was cut short by a crash and was skipped \(line \d+\)/)
      await expectResumed(callId)
    })

    it('runs a different program fresh, and asks the person again for the one it had checkpointed', async () => {
      const [callId] = await killedWhileWaiting()
      const second = await overStdio({ action: 'accept', content: { approve: true } })
      // other arguments: a new program, which runs from its start
      const other = await second.callTool({
        name: 'run_code',
        arguments: { code: "return (await tools.stamp({ text: 'fresh' })).stamped", description: 'another' },
      })
      expect(text(other)).to.include('fresh')
      const result = await second.callTool({ name: 'run_code', arguments: PROGRAM })
      expect(result.isError, text(result)).to.not.equal(true)
      expect(second.asked).to.have.length(1)
      expect(second.asked[0]).to.include('"write"').and.include('out.txt')
      expect(await stamps()).to.deep.equal(['before the wait', 'fresh'])
      expect(await readFile(join(dir, 'ws', 'out.txt'), 'utf8')).to.equal('approved')
      const results = (await records()).filter((r) => r.type === 'result' && r.callId === callId)
      expect(results).to.have.length(1)
      expect(results[0]).to.deep.include({ isError: false, value: DONE })
    })

    it('stopped gracefully (SIGTERM) while it waits: the program is left checkpointed, not cancelled, and runs again', async () => {
      const first = await overStdio(NEVER)
      const call = first.callTool({ name: 'run_code', arguments: PROGRAM }).catch((error: Error) => error)
      while (!(await readFile(log, 'utf8').catch(() => '')).includes('"type":"checkpoint"')) await sleep(20)
      while ((await pending()).length < 1) await sleep(50)
      process.kill(first.pid, 'SIGTERM')
      expect(await call).to.be.instanceOf(Error)
      // gone, its lock with it
      while (
        await Promise.resolve()
          .then(() => process.kill(first.pid, 0))
          .catch(() => false)
      )
        await sleep(20)
      const [callId] = (await records()).filter((r) => r.type === 'call').map((r) => r.call.id as string)
      expect((await records()).filter((r) => r.callId === callId && (r.type === 'result' || (r.type === 'journal' && r.reply)))).to.deep.equal([])
      // the deployment stopping withdrew its question: the person is asked again
      expect(await pending()).to.deep.equal([])
      const second = await overStdio({ action: 'accept', content: { approve: true } })
      const result = await second.callTool({ name: 'run_code', arguments: PROGRAM })
      expect(result.isError, text(result)).to.not.equal(true)
      expect(second.asked).to.have.length(1)
      await expectResumed(callId)
    })

    it('two programs with the same arguments checkpointed: the oldest runs again first, each once, then a new one runs fresh', async () => {
      const ids = await killedWhileWaiting(2)
      expect(ids).to.have.length(2)
      const second = await overStdio({ action: 'accept', content: { approve: true } })
      for (let i = 0; i < 3; i++) {
        const result = await second.callTool({ name: 'run_code', arguments: PROGRAM })
        expect(result.isError, text(result)).to.not.equal(true)
      }
      const results = (await records()).filter((r) => r.type === 'result').map((r) => r.callId)
      expect(results.slice(0, 2), 'in the order they were called').to.deep.equal(ids)
      expect(results).to.have.length(3)
      expect(ids).to.not.include(results[2])
      // two stamps of the first server; only the fresh third program stamps again
      expect(await stamps()).to.deep.equal(['before the wait', 'before the wait', 'before the wait'])
    })

    it('a second server on the same log is refused by pid while the first serves it, and writes nothing', async () => {
      const first = await overStdio(undefined)
      await first.listTools()
      const before = await readFile(log)
      const second = await faber(['mcp', join(dir, 'deploy.yml'), '--session-log', log], { timeoutMs: 60_000 })
      expect(second.code).to.equal(2)
      expect(second.stderr).to.match(new RegExp(`another process \\(pid ${first.pid}\\) has this session log open`))
      expect((await readFile(log)).equals(before)).to.equal(true)
    })

    it('over --http: after a restart the old Mcp-Session-Id gets 404, and a client that initializes again and calls run_code again gets the result', async () => {
      await writeFile(join(dir, 'deploy.yml'), `${deployment(backend)}session: { log: '\${dir}/session.jsonl' }\n`)
      const start = async (person: Person, at = '127.0.0.1:0', sessionId?: string) => {
        const server = serving(['mcp', join(dir, 'deploy.yml'), '--http', at], /at (http:\/\/\S+\/mcp)/)
        const url = new URL(await server.url)
        servers.push(server)
        const connected = client(person)
        await connected.connect(new StreamableHTTPClientTransport(url, { sessionId }))
        return Object.assign(connected, { server, url })
      }
      const first = await start(NEVER)
      const old = (first.transport as StreamableHTTPClientTransport).sessionId
      expect(old).to.be.a('string')
      const call = first.callTool({ name: 'run_code', arguments: PROGRAM }).catch((error: Error) => error)
      while (!(await readFile(log, 'utf8').catch(() => '')).includes('"type":"checkpoint"')) await sleep(20)
      while ((await pending()).length < 1) await sleep(50)
      first.server.child.kill('SIGKILL')
      // its MCP session is gone with it: the client gives up the call (else it waits out its request timeout)
      await first.close()
      expect(await call).to.be.instanceOf(Error)
      const [question] = await pending()
      expect((await faber(['grants', 'answer', question.id, 'allow', '--store', store])).code).to.equal(0)
      // the restarted server, at the same address; a client that goes on with the old session (the SDK sends no
      // initialize then) is told it is not found
      const second = await start(undefined, first.url.host, old)
      const stale = await second.callTool({ name: 'run_code', arguments: PROGRAM }).catch((error: Error) => error)
      expect(stale).to.be.instanceOf(StreamableHTTPError).and.to.include({ code: 404 })
      expect((stale as Error).message).to.include('Session not found')
      await second.close()
      const again = client(undefined)
      await again.connect(new StreamableHTTPClientTransport(second.url))
      const result = await again.callTool({ name: 'run_code', arguments: PROGRAM })
      expect(result.isError, text(result)).to.not.equal(true)
      const [callId] = (await records()).filter((r) => r.type === 'call').map((r) => r.call.id as string)
      // from the log, not from its start: the stamp before the wait is not made again
      await expectResumed(callId)
    })
  })
}
