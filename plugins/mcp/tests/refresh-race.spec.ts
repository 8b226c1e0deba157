// two processes of one deployment find the access token expired at the same moment and both refresh it, against an
// authorization server that takes each refresh token once: the store lets one refresh while the other waits and then
// uses what the first obtained, so the server sees one refresh and both calls go through. on SQLite and PostgreSQL.

import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as mcp from '@faber/plugin-mcp'
import type { DeploymentStore } from '@faber/store'
import { requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'
import { startOAuthServer } from './fixtures/oauth-server.ts'

const CHILD = fileURLToPath(new URL('./fixtures/refresh-child.ts', import.meta.url))

function child(store: string, url: string) {
  const proc = spawn(process.execPath, ['--import', 'tsx/esm', CHILD, store, url], { stdio: ['pipe', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  proc.stderr.on('data', (chunk) => (stderr += chunk))
  const ready = new Promise<void>((resolve) =>
    proc.stdout.on('data', (chunk) => {
      stdout += chunk
      if (stdout.includes('ready\n')) resolve()
    }),
  )
  const done = new Promise<{ isError: boolean; content: string }>((resolve, reject) =>
    proc.on('close', (code) => {
      const line = stdout.split('\n').find((l) => l.startsWith('{'))
      if (code === 0 && line) resolve(JSON.parse(line))
      else reject(new Error(`the child exited ${code}: ${stderr || stdout}`))
    }),
  )
  return { proc, ready, done }
}

describe('mcp OAuth: two processes refreshing at once refresh once', function () {
  this.timeout(120_000)
  let dir: string
  let server: Awaited<ReturnType<typeof startOAuthServer>>
  const children: ReturnType<typeof child>[] = []
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-refresh-'))
    server = await startOAuthServer()
  })
  afterEach(async () => {
    for (const c of children.splice(0)) c.proc.kill('SIGKILL')
    await server.close()
    await rm(dir, { recursive: true, force: true })
  })

  async function race(location: string, config: DeploymentStore.ConfigInput) {
    const login = await mcp.login({ server: { name: 'secure', url: server.url, auth: {} }, store: config, open: (url) => void fetch(url) })
    expect(login.ok, login.error).to.equal(true)
    const a = child(location, server.url)
    const b = child(location, server.url)
    children.push(a, b)
    await Promise.all([a.ready, b.ready])
    server.expireAccessTokens()
    a.proc.stdin.write('go\n')
    b.proc.stdin.write('go\n')
    const results = await Promise.all([a.done, b.done])
    for (const result of results) expect(result.isError, `${result.content} (tokens: ${server.seen.tokens})`).to.equal(false)
    expect(server.seen.tokens.filter((grant) => grant === 'refresh_token')).to.have.length(1)
  }

  it('on SQLite', async () => {
    const path = join(dir, 'faber.db')
    await race(path, { path })
  })

  it('on PostgreSQL', async function () {
    const cluster = await requirePostgres(this)
    const url = await cluster.database()
    await race(url, { url })
  })
})
