// @faber/store: `ctx.store`, the deployment's one database: a SQLite file (the embedded default) or a PostgreSQL
// server that several hosts share. plugins that keep state across processes, hosts and restarts (approval's grants,
// MCP sign-ins, fs-observation's record of reads) use it when it is loaded; where it lives is this plugin's config,
// so a deployment names it once.

import { defineConfig } from '@faber/core'
import { type Context, Schema, Service } from 'cordis'
import { PostgresStore } from './postgres.ts'
import { SqliteStore } from './sqlite.ts'
import type { Store } from './store.ts'

export { changeTrigger, type PostgresOptions, PostgresStore } from './postgres.ts'
export { PostgresCopy } from './postgres-copy.ts'
export { type SqliteOptions, SqliteStore } from './sqlite.ts'
export { type Migration, type Param, type Queryable, type Row, type Store, StoreError } from './store.ts'

declare module 'cordis' {
  interface Context {
    store: DeploymentStore
  }
}

/** where a store is: a file (`path`), a PostgreSQL URL (`url`), or the environment variable holding one (`urlEnv`) */
export interface StoreLocation {
  path?: string
  url?: string
  urlEnv?: string
  busyTimeout?: number
  statementTimeout?: number
  /** SQLite: open an existing file only */
  mustExist?: boolean
}

/** the URL a location names, or undefined for a file; a TypeError saying what to write when it names none or two */
export function storeUrl(location: StoreLocation, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const given = (['path', 'url', 'urlEnv'] as const).filter((key) => location[key] !== undefined)
  if (given.length !== 1) {
    throw new TypeError(
      `@faber/store: give one of path (a SQLite file), url (postgres://…) or urlEnv (the variable holding that URL)${given.length ? `, not ${given.join(' and ')}` : ''}`,
    )
  }
  if (location.path !== undefined) return undefined
  const url = location.url ?? env[location.urlEnv!]
  if (!url) throw new TypeError(`@faber/store: urlEnv names ${location.urlEnv}, which is not set; set it to the postgres:// URL of the store`)
  if (!/^postgres(ql)?:\/\//.test(url)) throw new TypeError(`@faber/store: ${location.url ? 'url' : location.urlEnv} must be a postgres:// URL`)
  return url
}

/** opens the store a location names and checks it (connects, for PostgreSQL); a StoreError when it cannot be used */
export async function openStore(location: StoreLocation): Promise<Store> {
  const store = connect(location)
  if (store instanceof PostgresStore) {
    try {
      await store.ready()
    } catch (error) {
      await store.close()
      throw error
    }
  }
  return store
}

function connect(location: StoreLocation): SqliteStore | PostgresStore {
  const url = storeUrl(location)
  if (url === undefined) return new SqliteStore(location.path!, { busyTimeout: location.busyTimeout, mustExist: location.mustExist })
  return new PostgresStore(url, { statementTimeout: location.statementTimeout })
}

/**
 * the service: `connection` is the Store the config names, closed when the plugin is disposed. it starts once the
 * store can be used: a store it cannot reach or one a newer Faber wrote fails the plugin's start, loudly.
 */
class DeploymentStore extends Service {
  static name = 'store'
  static inject: string[] = []
  declare ctx: Context
  readonly connection: Store

  constructor(ctx: Context, config: DeploymentStore.Config) {
    super(ctx, 'store', true)
    this.connection = connect(config)
    ctx.on('dispose', () => this.connection.close())
  }

  async start() {
    if (this.connection instanceof PostgresStore) await this.connection.ready()
  }

  get path() {
    return this.connection.path
  }
}

namespace DeploymentStore {
  export interface Config {
    path?: string
    url?: string
    urlEnv?: string
    busyTimeout: number
    statementTimeout: number
  }

  export interface ConfigInput {
    path?: string
    url?: string
    urlEnv?: string
    busyTimeout?: number
    statementTimeout?: number
  }

  export const Config = defineConfig<Config, ConfigInput>()(
    Schema.object({
      path: Schema.string().description('the SQLite database file; created with its directory when missing'),
      url: Schema.string().description('a postgres:// URL: the PostgreSQL database every host of the deployment shares'),
      urlEnv: Schema.string().description('the environment variable holding that URL (keeps its password out of the deployment file)'),
      busyTimeout: Schema.natural().default(5000).description("SQLite: ms a write waits for another process's transaction before failing"),
      statementTimeout: Schema.natural().default(5000).description('PostgreSQL: ms a statement may run before the server cancels it (0: no limit)'),
    }),
  )
}

export default DeploymentStore
export { DeploymentStore }
