import { spawn } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { call, deployment } from '@faber/core/testing'
import * as mcp from '@faber/plugin-mcp'
import DeploymentStore from '@faber/store'
import { requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'
import { startOAuthServer } from '../../../plugins/mcp/tests/fixtures/oauth-server.ts'
import { BIN, faber } from './helpers.ts'

/** `faber mcp login` as a person runs it: the test reads the printed URL and opens it as the browser would */
function login(args: string[]) {
  const child = spawn(process.execPath, [BIN, 'mcp', 'login', ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  const opened: Promise<Response>[] = []
  child.stdout.on('data', (chunk) => {
    stdout += chunk
    const url = /open this URL in a browser:\s+(\S+)/.exec(stdout)?.[1]
    if (url && !opened.length) opened.push(fetch(url))
  })
  child.stderr.on('data', (chunk) => (stderr += chunk))
  return new Promise<{ code: number | null; stdout: string; stderr: string; opened: number }>((resolve) =>
    child.on('close', (code) => resolve({ code, stdout, stderr, opened: opened.length })),
  )
}

describe('faber mcp login', function () {
  this.timeout(60000)
  let server: Awaited<ReturnType<typeof startOAuthServer>>
  let dir: string
  beforeEach(async () => {
    server = await startOAuthServer()
    dir = mkdtempSync(join(tmpdir(), 'faber-login-'))
    writeFileSync(
      join(dir, 'deploy.yml'),
      [
        'plugins:',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the deployment file's own ${dir} substitution
        "  '@faber/store': { path: '${dir}/faber.db' }",
        "  '@faber/plugin-mcp': { servers: [{ name: secure, url: '" + server.url + "', auth: {} }] }",
        '',
      ].join('\n'),
    )
  })
  afterEach(() => server.close())

  /** login, a deployment using what it kept, logout, on the store `deploy` names (`store`: the same, for this process) */
  async function round(deploy: string, store: DeploymentStore.ConfigInput) {
    const ran = await login(['secure', deploy])
    expect(ran.code, ran.stderr).to.equal(0)
    expect(ran.opened).to.equal(1)
    expect(ran.stdout).to.match(/logged in to "secure" \(2 tools\): access token at-\w… \(\d+ chars\), scope "mcp:read", refreshable/)
    expect(ran.stdout).to.not.match(/at-[0-9a-f]{24}/)
    // another process (this one) with the same store: connected at once, no new registration or authorization
    const ctx = await deployment({}, (ctx) => {
      ctx.plugin(DeploymentStore, store)
      ctx.plugin(mcp, { servers: [{ name: 'secure', url: server.url, auth: {} }] })
    })
    try {
      const result = await call(ctx, 'secure__whoami', {})
      expect(result.isError, result.content).to.equal(false)
      expect(server.seen.registrations).to.equal(1)
      expect(server.seen.authorizations).to.have.length(1)
    } finally {
      await ctx.stop()
    }
    const out = await faber(['mcp', 'logout', 'secure', deploy])
    expect(out.stdout).to.include('forgot the OAuth client and tokens of "secure"')
  }

  it('signs in through the printed URL and keeps the tokens for the next process, which asks no one', async () => {
    await round(join(dir, 'deploy.yml'), { path: join(dir, 'faber.db') })
  })

  it('does the same with a PostgreSQL store (urlEnv)', async function () {
    const cluster = await requirePostgres(this)
    const url = await cluster.database()
    const deploy = join(dir, 'deploy-pg.yml')
    writeFileSync(
      deploy,
      [
        'plugins:',
        "  '@faber/store': { urlEnv: FABER_TEST_STORE_URL }",
        "  '@faber/plugin-mcp': { servers: [{ name: secure, url: '" + server.url + "', auth: {} }] }",
        '',
      ].join('\n'),
    )
    process.env.FABER_TEST_STORE_URL = url
    try {
      await round(deploy, { url })
    } finally {
      delete process.env.FABER_TEST_STORE_URL
    }
  })

  it('names the servers it knows when asked for another', async () => {
    const ran = await faber(['mcp', 'login', 'nobody', join(dir, 'deploy.yml')])
    expect(ran.code).to.equal(2)
    expect(ran.stderr).to.include('imports no MCP server named "nobody"; its servers: secure')
  })
})
