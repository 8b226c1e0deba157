import { join } from 'node:path'
import { call, deployment, disposeAll } from '@faber/core/testing'
import DeploymentStore, { SqliteStore } from '@faber/store'
import { expect } from 'chai'
import type { Context } from 'cordis'
import * as mcp from '../src/index.ts'
import { startOAuthServer } from './fixtures/oauth-server.ts'
import { tempDir } from './helpers.ts'

type Fixture = Awaited<ReturnType<typeof startOAuthServer>>

/** plays the person: opens each printed authorization URL, consents (the fixture does at once) and follows the redirect back */
function browser(ctx: Context) {
  const opened: string[] = []
  const done: Promise<Response>[] = []
  ctx.on('mcp/authorize', ({ url }) => {
    opened.push(url)
    done.push(fetch(url))
  })
  return { opened, done }
}

async function deploy(server: Fixture, store: string | undefined, auth: Partial<mcp.McpAuth>, person = true) {
  let seen: ReturnType<typeof browser> | undefined
  const ctx = await deployment({ mode: 'native' }, (ctx) => {
    if (store) ctx.plugin(DeploymentStore, { path: store })
    seen = person ? browser(ctx) : undefined
    ctx.plugin(mcp, { servers: [{ name: 'secure', url: server.url, auth }], restart: { maxAttempts: 0 } })
  })
  return { ctx, seen, call: (name: string) => call(ctx, `secure__${name}`, {}) }
}

async function saved(path: string) {
  const store = new SqliteStore(path)
  try {
    return await new mcp.OAuthTable(store).list()
  } finally {
    await store.close()
  }
}

describe('mcp client: OAuth for imported servers', function () {
  this.timeout(30000)
  let server: Fixture
  afterEach(async () => {
    await disposeAll()
    await server?.close()
  })

  it('discovers, registers, authorizes with PKCE through the printed URL, and keeps the tokens in the store only', async () => {
    server = await startOAuthServer()
    const store = join(tempDir(), 'faber.db')
    const { ctx, seen, call } = await deploy(server, store, { interactive: true })
    expect(ctx.tools.get('secure__whoami')).to.not.equal(undefined)
    expect(seen?.opened).to.have.length(1)
    const opened = new URL(seen?.opened[0] ?? '')
    expect(opened.searchParams.get('code_challenge_method')).to.equal('S256')
    expect(opened.searchParams.get('redirect_uri')).to.match(/^http:\/\/127\.0\.0\.1:\d+\/callback$/)
    expect(server.seen.registrations).to.equal(1)
    expect(server.seen.authorizations[0]).to.deep.include({ resource: server.url, scope: 'mcp:read' })
    const result = await call('whoami')
    expect(result.isError).to.equal(false)
    expect(JSON.parse(result.content).scopes).to.deep.equal(['mcp:read'])
    const [row] = await saved(store)
    expect(row).to.deep.include({ server: 'secure', url: server.url, refreshToken: true, scope: 'mcp:read' })
    expect(row.accessToken).to.match(/^at-\w… \(\d+ chars\)$/)
  })

  it('reuses the stored tokens after a restart, with no person and no new authorization', async () => {
    server = await startOAuthServer()
    const store = join(tempDir(), 'faber.db')
    await deploy(server, store, { interactive: true })
    await disposeAll()
    const { call } = await deploy(server, store, {}, false)
    expect((await call('whoami')).isError).to.equal(false)
    expect(server.seen.authorizations).to.have.length(1)
    expect(server.seen.registrations).to.equal(1)
  })

  it('refreshes an expired access token without asking anyone', async () => {
    server = await startOAuthServer()
    const { seen, call } = await deploy(server, undefined, { interactive: true })
    server.expireAccessTokens()
    const result = await call('whoami')
    expect(result.isError, result.content).to.equal(false)
    expect(server.seen.tokens).to.deep.equal(['authorization_code', 'refresh_token'])
    expect(seen?.opened).to.have.length(1)
  })

  it('steps up on 403 insufficient_scope: a new authorization for the larger scope, then the call goes through', async () => {
    server = await startOAuthServer()
    const { seen, call } = await deploy(server, undefined, { interactive: true })
    const result = await call('write')
    expect(result.isError, result.content).to.equal(false)
    expect(result.content).to.equal('written')
    expect(seen?.opened).to.have.length(2)
    expect(server.seen.authorizations.map((a) => a.scope)).to.deep.equal(['mcp:read', 'mcp:read mcp:write'])
    expect(JSON.parse((await call('whoami')).content).scopes).to.deep.equal(['mcp:read', 'mcp:write'])
  })

  it('without a person to ask, the server fails with what to run, and nothing is sent to the authorization endpoint', async () => {
    server = await startOAuthServer()
    const { ctx } = await deploy(server, join(tempDir(), 'faber.db'), {}, false)
    expect(ctx.tools.get('secure__whoami')).to.equal(undefined)
    expect(server.seen.authorizations).to.have.length(0)
  })

  it('reports the login command in the server status when authorization is needed', async () => {
    server = await startOAuthServer()
    const statuses: mcp.McpStatus[] = []
    await deployment({ mode: 'native' }, (ctx) => {
      ctx.on('mcp/status', (status) => void statuses.push(status))
      ctx.plugin(mcp, { servers: [{ name: 'secure', url: server.url, auth: {} }], restart: { maxAttempts: 3 } })
    })
    expect(statuses).to.have.length(1)
    expect(statuses[0].state).to.equal('failed')
    expect(statuses[0].error).to.include('faber mcp login secure')
  })

  it('a step-up with no person at hand fails with the scope it needs, and the next login asks for it', async () => {
    server = await startOAuthServer()
    const store = join(tempDir(), 'faber.db')
    await deploy(server, store, { interactive: true })
    await disposeAll()
    const { call } = await deploy(server, store, {}, false)
    const refused = await call('write')
    expect(refused.isError).to.equal(true)
    expect(refused.content).to.include('needs authorization (scope "mcp:read mcp:write"): run `faber mcp login secure`')
    expect((await call('whoami')).isError, 'the smaller grant still serves').to.equal(false)
    await disposeAll()
    const login = await mcp.login({ server: { name: 'secure', url: server.url, auth: {} }, store: { path: store }, open: (url) => void fetch(url) })
    expect(login.ok, login.error).to.equal(true)
    expect(server.seen.authorizations.map((a) => a.scope)).to.deep.equal(['mcp:read', 'mcp:read mcp:write'])
    const after = await deploy(server, store, {}, false)
    expect((await after.call('write')).content).to.equal('written')
  })

  it('uses client credentials for a machine-to-machine server, the secret read from the environment', async () => {
    server = await startOAuthServer({ clients: { machine: 'machine-secret' } })
    process.env.FABER_TEST_MCP_SECRET = 'machine-secret'
    try {
      const { seen, call } = await deploy(server, undefined, { grant: 'client_credentials', clientId: 'machine', clientSecretEnv: 'FABER_TEST_MCP_SECRET' })
      const result = await call('whoami')
      expect(JSON.parse(result.content)).to.deep.equal({ client: 'machine', scopes: ['mcp:read'] })
      expect(server.seen.tokens).to.deep.equal(['client_credentials'])
      expect(seen?.opened).to.have.length(0)
      // a step-up is a new client_credentials grant with the larger scope
      expect((await call('write')).content).to.equal('written')
      expect(server.seen.tokens).to.deep.equal(['client_credentials', 'client_credentials'])
    } finally {
      delete process.env.FABER_TEST_MCP_SECRET
    }
  })

  it('uses a pre-registered client where the server offers no registration', async () => {
    server = await startOAuthServer({ noRegistration: true, clients: { 'pre-registered': 'pre-secret' } })
    const { call } = await deploy(server, undefined, { interactive: true, clientId: 'pre-registered', clientSecret: 'pre-secret' })
    expect(JSON.parse((await call('whoami')).content).client).to.equal('pre-registered')
    expect(server.seen.registrations).to.equal(0)
  })
})
