// @faber/store: `ctx.store`, the deployment's one SQLite database. plugins that keep state across processes and
// restarts (approval's grants, fs-observation's record of reads) use it when it is loaded; where the file lives
// is this plugin's config, so a deployment names it once.

import { defineConfig } from '@faber/core'
import { type Context, Schema, Service } from 'cordis'
import { Store } from './store.ts'

export { type Migration, Store, StoreError, type StoreOptions } from './store.ts'

declare module 'cordis' {
  interface Context {
    store: DeploymentStore
  }
}

/** the service: `connection` is the Store opened at the configured path, closed when the plugin is disposed */
class DeploymentStore extends Service {
  static name = 'store'
  declare ctx: Context
  readonly connection: Store

  constructor(ctx: Context, config: DeploymentStore.Config) {
    super(ctx, 'store', true)
    this.connection = new Store(config.path, { busyTimeout: config.busyTimeout })
    ctx.on('dispose', () => this.connection.close())
  }

  get path() {
    return this.connection.path
  }
}

namespace DeploymentStore {
  export interface Config {
    path: string
    busyTimeout: number
  }

  export interface ConfigInput {
    path: string
    busyTimeout?: number
  }

  export const Config = defineConfig<Config, ConfigInput>()(
    Schema.object({
      path: Schema.string().required().description('the SQLite database file; created with its directory when missing'),
      busyTimeout: Schema.natural().default(5000).description("ms a write waits for another process's transaction before failing"),
    }),
  )
}

export default DeploymentStore
export { DeploymentStore }
