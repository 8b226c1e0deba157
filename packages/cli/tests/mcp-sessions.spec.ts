// `faber mcp --http` with several official-SDK clients at once: what policies keep per conversation (the repeat-call
// breaker, per-turn rate limits, session grants) is kept per MCP session, so one client's repeats stop only that client

import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Client } from '@modelcontextprotocol/sdk/client/index.js'
import type { CallToolResult, ElicitResult } from '@modelcontextprotocol/sdk/types.js'
import { expect } from 'chai'
import { mcpOverHttp } from './helpers.ts'

const DEPLOYMENT = `mode: both
plugins:
  '@faber/sandbox': { poolSize: 1 }
  '@faber/plugin-tools-fs': { root: '\${dir}/ws' }
  '@faber/plugin-guards':
    breaker: { remindAfter: 2, blockAfter: 3 }
    rateLimits: [{ name: lists, tools: [list], perTurn: 2 }]
  '@faber/plugin-approval': { require: [write], except: [] }
`

const PROGRAM = { code: "return (await tools.read({ path: 'notes.txt' })).text", description: 'read the notes' }

function text(result: unknown) {
  return (result as CallToolResult).content.map((part) => (part.type === 'text' ? part.text : '')).join('\n')
}

describe('faber mcp --http: per-conversation state per MCP session', function () {
  this.timeout(60_000)
  const served = mcpOverHttp(DEPLOYMENT)
  const httpClient = (answer?: ElicitResult) => served.client(answer)

  it('stops only the client that repeats a call, whatever the others send', async () => {
    const all = await Promise.all(Array.from({ length: 5 }, () => httpClient()))
    const run = (client: Client) => client.callTool({ name: 'run_code', arguments: PROGRAM })
    for (const result of await Promise.all(all.map(run))) expect(text(result), text(result)).to.include('hello')
    const [repeater, ...others] = all
    expect(text(await run(repeater))).to.include('[reminder]')
    const blocked = await run(repeater)
    expect(blocked.isError).to.equal(true)
    expect(text(blocked)).to.include('repeat-call breaker: "run_code" was called 3 times in a row')
    for (const result of await Promise.all(others.map(run))) {
      expect(result.isError, text(result)).to.equal(false)
      expect(text(result)).to.include('hello').and.include('That was call 2 in a row')
    }
  })

  it("counts a per-turn limit per session: one client's calls leave the others theirs", async () => {
    const [first, second] = await Promise.all([httpClient(), httpClient()])
    // different arguments each time, so that the breaker has nothing to say
    const list = (client: Client, path = '.') => client.callTool({ name: 'list', arguments: { path } })
    for (const path of ['.', './']) expect((await list(first, path)).isError).to.equal(false)
    const limited = await list(first)
    expect(text(limited)).to.include('rate limit "lists"')
    const other = await list(second)
    expect(other.isError, text(other)).to.equal(false)
    expect(text(other)).to.include('notes.txt')
  })

  it('keeps a grant "for this session" to the session that made it', async () => {
    const granting = await httpClient({ action: 'accept', content: { approve: true, remember: true } })
    const declining = await httpClient({ action: 'decline' })
    const write = (client: Client, path: string) => client.callTool({ name: 'write', arguments: { path, content: `${path}\n` } })
    expect((await write(granting, 'a.txt')).isError).to.equal(false)
    expect((await write(granting, 'b.txt')).isError).to.equal(false)
    expect(granting.asked).to.have.length(1)
    expect(await readFile(join(served.dir, 'ws', 'b.txt'), 'utf8')).to.equal('b.txt\n')
    const refused = await write(declining, 'c.txt')
    expect(refused).to.deep.include({ isError: true, _meta: { 'faber/error': { code: 'DENIED' } } })
    expect(declining.asked).to.have.length(1)
    // nor does a client that comes after the session that made it ended
    await granting.close()
    const later = await httpClient({ action: 'decline' })
    expect((await write(later, 'd.txt')).isError).to.equal(true)
    expect(later.asked).to.have.length(1)
  })
})
