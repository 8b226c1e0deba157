// OAuth for imported streamable HTTP servers, on the SDK's client auth (`auth()` and OAuthClientProvider): what one
// server's authorization keeps (its registered client, tokens and discovery) lives in the deployment's store, table
// `mcp_oauth`, or in memory without one; a person authorizes through a URL and a callback on 127.0.0.1.

import { randomBytes } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { Migration, Queryable, Store } from '@faber/store'
import type { AddClientAuthentication, OAuthClientProvider, OAuthDiscoveryState } from '@modelcontextprotocol/sdk/client/auth.js'
import { extractWWWAuthenticateParams } from '@modelcontextprotocol/sdk/client/auth.js'
import { createPrivateKeyJwtAuth } from '@modelcontextprotocol/sdk/client/auth-extensions.js'
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js'
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js'

/** how a deployer configures a server's authorization (`servers[].auth`) */
export interface McpAuth {
  /** `authorization_code` (a person signs in, PKCE) or `client_credentials` (machine to machine) */
  grant: 'authorization_code' | 'client_credentials'
  /** a pre-registered client; without one the client registers itself (dynamic client registration) */
  clientId?: string
  clientSecret?: string
  /** the environment variable holding clientSecret, so the secret stays out of the deployment file */
  clientSecretEnv?: string
  /** a PEM (PKCS#8) private key: the client authenticates with a signed JWT (private_key_jwt) instead of a secret */
  privateKey?: string
  /** the environment variable holding privateKey */
  privateKeyEnv?: string
  /** the JWT signing algorithm for privateKey */
  signingAlgorithm: string
  /** an https URL of a client ID metadata document, used as client_id where the server supports it */
  clientMetadataUrl?: string
  /** the scope asked for when the server does not say which it needs */
  scope?: string
  clientName: string
  /** the port of the callback on 127.0.0.1 while a person authorizes; 0: a free one */
  callbackPort: number
  /** wait for a person to authorize (URL printed, `mcp/authorize` emitted) instead of failing with "run faber mcp login" */
  interactive: boolean
  /** how long a person has to authorize */
  authorizeTimeoutMs: number
}

/** what one server's authorization keeps */
export interface SavedOAuth {
  client?: OAuthClientInformationMixed
  tokens?: OAuthTokens & { obtained_at?: number }
  discovery?: OAuthDiscoveryState
  /** the scope a step-up asked for that nobody signed in for yet: the next sign-in asks for it too */
  wanted?: string
}

/** one server's saved authorization: read afresh each time, so another process's login is seen */
export interface OAuthRecord {
  read(): Promise<SavedOAuth>
  write(patch: Partial<Record<keyof SavedOAuth, unknown>>): Promise<void>
  /** fn with the record held against every other process and host sharing the store until it returns */
  exclusive<T>(fn: (record: Pick<OAuthRecord, 'read' | 'write'>) => Promise<T>): Promise<T>
}

// updated_at is ms since the epoch: BIGINT on PostgreSQL, where INTEGER is 32-bit
const oauthTable = (integer: string) => `CREATE TABLE mcp_oauth (
  server TEXT NOT NULL,
  url TEXT NOT NULL,
  client TEXT,
  tokens TEXT,
  discovery TEXT,
  updated_at ${integer} NOT NULL,
  PRIMARY KEY (server, url)
)`

const MIGRATIONS: Migration[] = [{ sqlite: `${oauthTable('INTEGER')} STRICT`, postgres: oauthTable('BIGINT') }, 'ALTER TABLE mcp_oauth ADD COLUMN wanted TEXT']

const COLUMNS = ['client', 'tokens', 'discovery', 'wanted'] as const

/** the table `mcp_oauth` of the deployment's store: a row per (server name, URL), so a moved server starts afresh */
export class OAuthTable {
  private migrated?: Promise<void>

  constructor(readonly store: Store) {}

  private ready(): Promise<void> {
    this.migrated ??= this.store.migrate('mcp', MIGRATIONS).catch((error) => {
      this.migrated = undefined
      throw error
    })
    return this.migrated
  }

  record(server: string, url: string): OAuthRecord {
    const on = (q: Queryable): Pick<OAuthRecord, 'read' | 'write'> => ({
      read: async () => {
        const row = await q.get<Record<(typeof COLUMNS)[number], string | null>>(`SELECT ${COLUMNS.join(', ')} FROM mcp_oauth WHERE server = ? AND url = ?`, [
          server,
          url,
        ])
        const saved: SavedOAuth = {}
        for (const column of COLUMNS) if (row?.[column]) saved[column] = JSON.parse(row[column])
        return saved
      },
      write: async (patch) => {
        const now = Date.now()
        await q.run('INSERT INTO mcp_oauth (server, url, updated_at) VALUES (?, ?, ?) ON CONFLICT (server, url) DO NOTHING', [server, url, now])
        for (const [column, value] of Object.entries(patch)) {
          if (!(COLUMNS as readonly string[]).includes(column)) throw new TypeError(`mcp_oauth has no column ${column}`)
          await q.run(`UPDATE mcp_oauth SET ${column} = ?, updated_at = ? WHERE server = ? AND url = ?`, [
            value === undefined ? null : JSON.stringify(value),
            now,
            server,
            url,
          ])
        }
      },
    })
    return {
      read: async () => {
        await this.ready()
        return on(this.store).read()
      },
      write: async (patch) => {
        await this.ready()
        await this.store.transaction((tx) => on(tx).write(patch))
      },
      exclusive: async (fn) => {
        await this.ready()
        return this.store.exclusive(`mcp_oauth ${server} ${url}`, (tx) => fn(on(tx)))
      },
    }
  }

  /** what is kept, secrets masked: for `faber mcp logout`, status lines and tests */
  async list(): Promise<{ server: string; url: string; client?: string; accessToken?: string; refreshToken: boolean; expiresAt?: number; scope?: string }[]> {
    await this.ready()
    const rows = await this.store.all<{ server: string; url: string; client: string | null; tokens: string | null }>(
      'SELECT server, url, client, tokens FROM mcp_oauth ORDER BY server, url',
    )
    return rows.map((row) => {
      const client = row.client ? (JSON.parse(row.client) as OAuthClientInformationMixed) : undefined
      const tokens = row.tokens ? (JSON.parse(row.tokens) as SavedOAuth['tokens']) : undefined
      return {
        server: row.server,
        url: row.url,
        client: client?.client_id,
        accessToken: tokens && mask(tokens.access_token),
        refreshToken: Boolean(tokens?.refresh_token),
        expiresAt: expiresAt(tokens),
        scope: tokens?.scope,
      }
    })
  }

  /** forgets a server's client and tokens; true when there were any */
  async remove(server: string): Promise<boolean> {
    await this.ready()
    return (await this.store.run('DELETE FROM mcp_oauth WHERE server = ?', [server])) > 0
  }
}

/** a record kept in memory only, for a deployment without a store: lost when the process ends */
export function memoryRecord(): OAuthRecord {
  let saved: SavedOAuth = {}
  let held: Promise<unknown> = Promise.resolve()
  const record: Pick<OAuthRecord, 'read' | 'write'> = {
    read: async () => structuredClone(saved),
    write: async (patch) => {
      saved = { ...saved, ...structuredClone(patch) } as SavedOAuth
    },
  }
  return {
    ...record,
    exclusive: (fn) => {
      const run = held.then(() => fn(record))
      held = run.catch(() => {})
      return run
    },
  }
}

/** a secret as it may be shown: its first characters and its length */
export function mask(secret: string | undefined): string | undefined {
  if (secret === undefined) return undefined
  return secret.length <= 8 ? `*** (${secret.length} chars)` : `${secret.slice(0, 4)}… (${secret.length} chars)`
}

/** two space-separated scope lists as one, each scope once */
function union(a: string, b: string) {
  return [...new Set([...a.split(' '), ...b.split(' ')].filter(Boolean))].join(' ')
}

function expiresAt(tokens: SavedOAuth['tokens']) {
  return tokens?.expires_in !== undefined && tokens.obtained_at !== undefined ? tokens.obtained_at + tokens.expires_in * 1000 : undefined
}

/** the server needs a person to authorize and none is waiting: `faber mcp login` is the way */
export class AuthorizationRequired extends Error {
  constructor(
    readonly server: string,
    readonly url: URL,
  ) {
    const scope = url.searchParams.get('scope')
    super(
      `MCP server "${server}" needs authorization${scope ? ` (scope "${scope}")` : ''}: run \`faber mcp login ${server}\` (or set auth.interactive to authorize when asked)`,
    )
    this.name = 'AuthorizationRequired'
  }

  static isInstance(value: unknown): value is AuthorizationRequired {
    return value instanceof Error && value.name === 'AuthorizationRequired'
  }
}

/**
 * the SDK's OAuthClientProvider over a record. `redirect` decides what happens when a person must authorize (wait
 * for the callback, or throw AuthorizationRequired); `challenged` is told each `403 insufficient_scope`, after which
 * the refresh token is withheld from the SDK so it asks for the larger scope instead of refreshing the smaller one.
 */
export class StoredOAuthProvider implements OAuthClientProvider {
  private verifier?: string
  private stepUp?: string
  /** the access token the MCP endpoint last refused (401): a refresh is for replacing that one, not a newer one */
  private refused?: string
  /** the callback URL while a callback server listens; without one, the port configured (or a portless loopback URL) */
  callbackUrl?: string
  /** private_key_jwt: a signed assertion instead of a secret (the SDK calls this for every token request) */
  readonly addClientAuthentication?: AddClientAuthentication

  constructor(
    private record: OAuthRecord,
    private config: McpAuth,
    private redirect: (url: URL) => void | Promise<void>,
  ) {
    const key = config.privateKey ?? (config.privateKeyEnv ? process.env[config.privateKeyEnv] : undefined)
    if (key && config.clientId) {
      this.addClientAuthentication = createPrivateKeyJwtAuth({
        issuer: config.clientId,
        subject: config.clientId,
        privateKey: key,
        alg: config.signingAlgorithm,
      })
    }
  }

  private get secret() {
    return this.config.clientSecret ?? (this.config.clientSecretEnv ? process.env[this.config.clientSecretEnv] : undefined)
  }

  get redirectUrl(): string | undefined {
    if (this.config.grant === 'client_credentials') return undefined
    return this.callbackUrl ?? `http://127.0.0.1${this.config.callbackPort ? `:${this.config.callbackPort}` : ''}/callback`
  }

  get clientMetadataUrl() {
    return this.config.clientMetadataUrl
  }

  get clientMetadata(): OAuthClientMetadata {
    const machine = this.config.grant === 'client_credentials'
    const redirect = this.redirectUrl
    return {
      client_name: this.config.clientName,
      redirect_uris: redirect ? [redirect] : [],
      grant_types: machine ? ['client_credentials'] : ['authorization_code', 'refresh_token'],
      response_types: machine ? [] : ['code'],
      token_endpoint_auth_method: this.addClientAuthentication ? 'private_key_jwt' : this.secret ? 'client_secret_basic' : 'none',
      ...((this.stepUp ?? this.config.scope) ? { scope: this.stepUp ?? this.config.scope } : {}),
    }
  }

  state() {
    return randomBytes(16).toString('base64url')
  }

  async clientInformation(): Promise<OAuthClientInformationMixed | undefined> {
    if (this.config.clientId) return { client_id: this.config.clientId, ...(this.secret ? { client_secret: this.secret } : {}) }
    const { client } = await this.record.read()
    // a registration made for another callback URL cannot receive this one's code: register again. only while a
    // callback listens: without one no code is received here, and the client `faber mcp login` registered is the one
    // its refresh token belongs to
    const uris = (client as { redirect_uris?: string[] } | undefined)?.redirect_uris
    const redirect = this.callbackUrl
    if (client && redirect && uris?.length && !uris.includes(redirect)) return undefined
    return client
  }

  async saveClientInformation(client: OAuthClientInformationMixed) {
    if (this.config.clientId) return
    await this.record.write({ client })
  }

  async tokens(): Promise<OAuthTokens | undefined> {
    const { tokens } = await this.record.read()
    if (!tokens) return undefined
    const { obtained_at: _, ...plain } = tokens
    // a step-up needs a new grant with the larger scope; a refresh would only renew the smaller one
    if (this.stepUp !== undefined) delete plain.refresh_token
    return plain
  }

  async saveTokens(tokens: OAuthTokens) {
    const { tokens: previous, wanted } = await this.record.read()
    // a refresh response may leave the refresh token out: the old one stays valid
    const refresh = tokens.refresh_token ?? (this.stepUp === undefined ? previous?.refresh_token : undefined)
    const saved = { ...tokens, ...(refresh ? { refresh_token: refresh } : {}), obtained_at: Date.now() }
    const granted = tokens.scope === undefined || wanted?.split(' ').every((scope) => tokens.scope?.split(' ').includes(scope))
    await this.record.write({ tokens: saved, ...(wanted && granted ? { wanted: undefined } : {}) })
    this.stepUp = undefined
  }

  async redirectToAuthorization(url: URL) {
    // a step-up that found nobody to sign in earlier (another process, say) is asked for now
    const { wanted } = await this.record.read()
    if (wanted) url.searchParams.set('scope', union(url.searchParams.get('scope') ?? '', wanted))
    try {
      await this.redirect(url)
    } catch (error) {
      // nobody will sign in for the larger scope now: remember it for the next sign-in, and let the refresh token
      // serve the smaller one again
      if (this.stepUp) await this.record.write({ wanted: union(wanted ?? '', this.stepUp) })
      this.stepUp = undefined
      throw error
    }
  }

  saveCodeVerifier(verifier: string) {
    this.verifier = verifier
  }

  codeVerifier(): string {
    if (!this.verifier) throw new Error('no authorization is in progress (no PKCE code verifier was made)')
    return this.verifier
  }

  async invalidateCredentials(scope: 'all' | 'client' | 'tokens' | 'verifier' | 'discovery') {
    if (scope === 'verifier') {
      this.verifier = undefined
      return
    }
    const patch: Partial<Record<keyof SavedOAuth, unknown>> = {}
    if (scope === 'all' || scope === 'tokens') patch.tokens = undefined
    if ((scope === 'all' || scope === 'client') && !this.config.clientId) patch.client = undefined
    if (scope === 'all' || scope === 'discovery') patch.discovery = undefined
    await this.record.write(patch)
  }

  async discoveryState() {
    return (await this.record.read()).discovery
  }

  async saveDiscoveryState(discovery: OAuthDiscoveryState) {
    await this.record.write({ discovery })
  }

  prepareTokenRequest(scope?: string): URLSearchParams | undefined {
    if (this.config.grant !== 'client_credentials') return undefined
    return new URLSearchParams({ grant_type: 'client_credentials', ...(scope ? { scope } : {}) })
  }

  /**
   * a refresh, holding the record against every other process and host: a server that rotates refresh tokens takes
   * each once, so two hosts refreshing with the same token at once would leave one with invalid_grant and no tokens.
   * the one that waited finds the token it meant to spend already spent and gets, as the server's answer, the tokens
   * the other obtained (kept before the record is let go)
   */
  private refreshOnce(spent: string, refresh: () => Promise<Response>): Promise<Response> {
    return this.record.exclusive(async (record) => {
      const { tokens } = await record.read()
      // another process refreshed first: its refresh token replaced the one this one means to spend (a server that
      // rotates them), or its access token replaced the one the endpoint refused here and is not past its expiry (the
      // SDK read the new tokens only after that refusal, so it would spend the new refresh token once more)
      const expiry = expiresAt(tokens)
      const replaced = this.refused !== undefined && tokens?.access_token !== this.refused && (expiry === undefined || expiry > Date.now())
      if (tokens?.access_token && tokens.refresh_token && (tokens.refresh_token !== spent || replaced)) {
        const { obtained_at, ...answer } = tokens
        const left = expiresAt(tokens)
        return Response.json(left === undefined ? answer : { ...answer, expires_in: Math.max(0, Math.floor((left - Date.now()) / 1000)) })
      }
      const response = await refresh()
      const obtained = response.ok ? ((await response.clone().json()) as OAuthTokens) : undefined
      if (obtained?.access_token)
        await record.write({ tokens: { ...tokens, ...obtained, refresh_token: obtained.refresh_token ?? spent, obtained_at: Date.now() } })
      return response
    })
  }

  /** the MCP endpoint answered `403 insufficient_scope` for `scope` */
  challenged(scope: string | undefined) {
    this.stepUp = scope ?? this.config.scope ?? ''
  }

  /**
   * a fetch for the transport that reports the endpoint's scope challenges to this provider, and makes a refresh one
   * at a time across the processes and hosts sharing the store (see refreshOnce)
   */
  watch(endpoint: URL, fetcher: FetchLike = fetch): FetchLike {
    return async (url, init) => {
      const spent = refreshTokenOf(init)
      if (spent !== undefined) return this.refreshOnce(spent, () => fetcher(url, init))
      const response = await fetcher(url, init)
      if (response.status === 401) this.refused = bearerOf(init) ?? this.refused
      if (response.status === 403 && String(url) === endpoint.href) {
        const { error, scope } = extractWWWAuthenticateParams(response)
        if (error === 'insufficient_scope') this.challenged(scope)
      }
      return response
    }
  }
}

/** the bearer token a request carried */
function bearerOf(init: RequestInit | undefined): string | undefined {
  const header = new Headers(init?.headers).get('authorization')
  return header?.toLowerCase().startsWith('bearer ') ? header.slice(7) : undefined
}

/** the refresh token a token request spends, or undefined for any other request */
function refreshTokenOf(init: RequestInit | undefined): string | undefined {
  if (init?.method !== 'POST') return undefined
  const form = init.body instanceof URLSearchParams ? init.body : typeof init.body === 'string' ? new URLSearchParams(init.body) : undefined
  return form?.get('grant_type') === 'refresh_token' ? (form.get('refresh_token') ?? undefined) : undefined
}

/** the loopback callback a person's browser is sent back to: it hands each authorization code to whoever waits for its state */
export class OAuthCallback {
  private waiting = new Map<string, { resolve: (code: string) => void; reject: (error: Error) => void; timer: ReturnType<typeof setTimeout> }>()

  private constructor(
    private server: Server,
    readonly url: string,
  ) {
    server.on('request', (request, response) => {
      const query = new URL(request.url ?? '/', url).searchParams
      const state = query.get('state') ?? ''
      const waiter = new URL(request.url ?? '/', url).pathname === '/callback' ? this.waiting.get(state) : undefined
      if (!waiter) {
        response.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('No Faber authorization is waiting for this.\n')
        return
      }
      this.waiting.delete(state)
      clearTimeout(waiter.timer)
      const code = query.get('code')
      const error = query.get('error')
      if (code) {
        response.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end('Faber is authorized. You can close this tab.\n')
        waiter.resolve(code)
      } else {
        response.writeHead(400, { 'content-type': 'text/plain; charset=utf-8' }).end(`Authorization failed: ${error ?? 'no code'}\n`)
        waiter.reject(
          new Error(
            `the authorization server answered ${error ?? 'without a code'}${query.get('error_description') ? `: ${query.get('error_description')}` : ''}`,
          ),
        )
      }
    })
  }

  static listen(port = 0): Promise<OAuthCallback> {
    return new Promise((resolve, reject) => {
      const server = createServer()
      server.once('error', reject)
      server.listen(port, '127.0.0.1', () => {
        const address = server.address()
        if (!address || typeof address === 'string') return reject(new Error('the callback server has no port'))
        resolve(new OAuthCallback(server, `http://127.0.0.1:${address.port}/callback`))
      })
    })
  }

  /** resolves with the code the browser brings back for `state` */
  expect(state: string, timeoutMs: number): Promise<string> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(state)
        reject(new Error(`nobody authorized within ${Math.round(timeoutMs / 1000)} s`))
      }, timeoutMs)
      timer.unref?.()
      this.waiting.set(state, { resolve, reject, timer })
    })
  }

  close() {
    for (const waiter of this.waiting.values()) {
      clearTimeout(waiter.timer)
      waiter.reject(new Error('the authorization was abandoned'))
    }
    this.waiting.clear()
    this.server.closeAllConnections()
    this.server.close()
  }
}
