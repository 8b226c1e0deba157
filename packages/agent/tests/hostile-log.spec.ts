// session logs that are not what Faber wrote: bytes that are not UTF-8 before a torn last line, a journal record
// carrying more values than one call of a function may take. the log keeps what it recorded, and is read, not thrown

import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { checkpointsOf, LOG_VERSION, parseSessionLog, SessionLog } from '@faber/agent'
import { expect } from 'chai'

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
})
