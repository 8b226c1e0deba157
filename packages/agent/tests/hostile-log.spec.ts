// session logs that are not what Faber wrote: bytes that are not UTF-8 before a torn last line, a journal record
// carrying more values than one call of a function may take, a log another process is writing. the log keeps what it
// recorded, and is read, not thrown; a second writer is refused

import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { checkpointsOf, LOG_VERSION, parseSessionLog, SessionLog } from '@faber/agent'
import { expect } from 'chai'

const SESSION_LOG = new URL('../src/session-log.ts', import.meta.url).href

/** another process holding `path` open as its session log, as faber run does */
async function writer(path: string) {
  const code = `const { SessionLog } = await import(${JSON.stringify(SESSION_LOG)}); await SessionLog.open(${JSON.stringify(path)}); console.log('open'); setInterval(() => {}, 1000)`
  const child = spawn(process.execPath, ['--import', 'tsx/esm', '--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] })
  const [chunk] = await once(child.stdout, 'data')
  expect(String(chunk)).to.equal('open\n')
  return child
}

const line = (record: unknown) => `${JSON.stringify(record)}\n`

describe('hostile session logs', () => {
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-hostile-log-'))
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  it('bytes that are not UTF-8 before a torn last line: the tear is cut at its own byte, and what is appended after reads back', async () => {
    const path = join(dir, 'session.jsonl')
    const session = Buffer.from(line({ type: 'session', version: LOG_VERSION, id: 's', model: 'm' }))
    // a message whose text holds bytes that are no UTF-8 (each decodes to the 3-byte U+FFFD), then a record torn mid-write
    const message = Buffer.concat([
      Buffer.from('{"type":"message","turn":1,"message":{"role":"user","content":"'),
      Buffer.from([0xff, 0xfe, 0xc3]),
      Buffer.from('"}}\n'),
    ])
    await writeFile(path, Buffer.concat([session, message, Buffer.from('{"type":"turn","tu')]))
    const log = await SessionLog.open(path)
    expect(log.truncated?.text).to.equal('{"type":"turn","tu')
    expect(log.records.map((r) => r.type)).to.deep.equal(['session', 'message'])
    log.append({ type: 'turn', turn: 2 })
    await log.close()
    const bytes = await readFile(path)
    expect(bytes.subarray(0, session.length + message.length).equals(Buffer.concat([session, message])), 'what was recorded is kept byte for byte').to.equal(
      true,
    )
    const again = parseSessionLog(bytes.toString('utf8'), path)
    expect(again.records.map((r) => r.type)).to.deep.equal(['session', 'message', 'turn'])
    expect(again.truncated).to.equal(undefined)
  })

  it('a journal record with 200,000 values: read whole, not a stack overflow', () => {
    const values = Array.from({ length: 200_000 }, (_, i) => i / 200_000)
    const records = [
      { type: 'session', version: LOG_VERSION, id: 's', model: 'm' },
      { type: 'turn', turn: 1 },
      { type: 'call', turn: 1, step: 1, call: { id: 'run1', name: 'run_code', arguments: '{}' }, mode: 'exclusive' },
      { type: 'checkpoint', turn: 1, outerCallId: 'run1', calls: [], values: [0.5], sequence: 0, running: [] },
      { type: 'journal', turn: 1, outerCallId: 'run1', values },
    ]
    const found = checkpointsOf(records, 'session.jsonl').get('run1')
    expect(found?.checkpoint.values).to.have.length(200_001)
    expect(found?.checkpoint.values[200_000]).to.equal(values[199_999])
  })

  it('a program checkpointed again: a later checkpoint holding its settled calls is read, one dropping one is refused by line', () => {
    const head = [
      { type: 'session', version: LOG_VERSION, id: 's', model: 'm' },
      { type: 'turn', turn: 1 },
      { type: 'call', turn: 1, step: 1, call: { id: 'run1', name: 'run_code', arguments: '{}' }, mode: 'exclusive' },
    ]
    const count = { callId: 'run1/1', name: 'count', arguments: '{}', reply: { ok: true, value: '1' } }
    const deploy = { callId: 'run1/2', name: 'deploy', arguments: '{}', reply: { ok: true, value: '"deployed"' } }
    const checkpoint = (calls: object[]) => ({ type: 'checkpoint', turn: 1, outerCallId: 'run1', calls, values: [], sequence: calls.length, running: [] })
    const first = checkpoint([count, deploy, { callId: 'run1/3', name: 'notify', arguments: '{}' }])
    const again = checkpoint([count, deploy, { ...first.calls[2], reply: { ok: true, value: 'null' } }, { callId: 'run1/4', name: 'ask', arguments: '{}' }])
    expect(
      checkpointsOf([...head, first, again])
        .get('run1')
        ?.checkpoint.calls.map((c) => c.name),
    ).to.deep.equal(['count', 'deploy', 'notify', 'ask'])
    // the deploy that ran, dropped: a run of the program again would make it again
    expect(() => checkpointsOf([...head, first, checkpoint([count])], 'session.jsonl')).to.throw(
      'session.jsonl:5: a checkpoint of run_code "run1" that drops or changes its call 2, settled in its earlier checkpoint; the log is not one Faber wrote',
    )
  })

  it('a log another process writes is refused, naming it; once that process is killed, it is taken over', async function () {
    this.timeout(20_000)
    const path = join(dir, 'session.jsonl')
    await writeFile(path, line({ type: 'session', version: LOG_VERSION, id: 's', model: 'm' }))
    const child = await writer(path)
    try {
      const error = await SessionLog.open(path).catch((caught) => caught)
      expect(error?.name).to.equal('SessionLogError')
      expect(error.message).to.equal(
        `${path}: another process (pid ${child.pid}) has this session log open: it is continuing the session, and would run any program the session left waiting a second time. Wait for it to end (or stop it), then continue the session`,
      )
    } finally {
      child.kill('SIGKILL')
      await once(child, 'exit')
    }
    const log = await SessionLog.open(path)
    expect(log.records.map((r) => r.type)).to.deep.equal(['session'])
    const again = await SessionLog.open(path).catch((caught) => caught)
    expect(again?.message).to.equal(`${path}: this process has the log open already (another SessionLog on it is still open); close it first`)
    await log.close()
    expect(existsSync(`${path}.lock`), 'no lock file is left beside the log to clean up').to.equal(false)
    await (await SessionLog.open(path)).close()
  })
})
