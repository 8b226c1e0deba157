// the server driver: a PostgreSQL database that every host of a deployment shares, through node-postgres (a pool
// of a few connections). writes to a table a migration gave the `faber_changed` trigger notify channel
// `faber_store`; a connection of its own listens there, so a reader's change mark moves when any host commits. while
// that connection is down the mark is unknown and readers read again, so a lost notification never leaves a stale
// cache trusted. every failure (the server gone, a dropped connection, a statement timeout, a read-only server)
// rejects the call with a StoreError; the pool and the listener connect again by themselves.

import pg from 'pg'
import { applyMigrations, type Migration, type Param, type Queryable, type Row, STORE_OWNER, type Store, StoreError } from './store.ts'

export interface PostgresOptions {
  /** a statement running longer than this is cancelled by the server, in ms (default 5000; 0: none) */
  statementTimeout?: number
  /** connections the pool keeps at most (default 4) */
  poolSize?: number
}

const CHANNEL = 'faber_store'

// version 1 of the store's own tables, as SQLite's: faber_schema, and here the function change triggers call
const STORE_STEPS: Migration[] = [
  `CREATE OR REPLACE FUNCTION faber_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_notify('${CHANNEL}', TG_TABLE_NAME); RETURN NULL; END $$`,
]

/** `?` placeholders to PostgreSQL's `$1`, `$2`, ... (the SQL Faber writes has no `?` in its literals) */
function numbered(sql: string) {
  let n = 0
  return sql.replace(/\?/g, () => `$${++n}`)
}

export function masked(url: string) {
  try {
    const parsed = new URL(url)
    if (parsed.password) parsed.password = '***'
    return parsed.href
  } catch {
    return 'postgres://(an unreadable URL)'
  }
}

/** the trigger a migration adds to a table whose changes readers cache (approval's grants) */
export function changeTrigger(table: string) {
  return `CREATE TRIGGER ${table}_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON ${table} FOR EACH STATEMENT EXECUTE FUNCTION faber_changed()`
}

export class PostgresStore implements Store {
  readonly driver = 'postgres'
  readonly path: string
  private readonly pool: pg.Pool
  private closed = false
  private opening?: Promise<void>
  private listener?: pg.Client
  private listening = false
  private retry?: NodeJS.Timeout
  /** change marks: a sequence moved by each notification (per table) and by each (re)connection of the listener */
  private sequence = 0
  private base = 0
  private readonly marks = new Map<string, number>()

  constructor(
    private readonly url: string,
    options: PostgresOptions = {},
  ) {
    this.path = masked(url)
    const timeout = options.statementTimeout ?? 5000
    this.pool = new pg.Pool({
      connectionString: url,
      max: options.poolSize ?? 4,
      connectionTimeoutMillis: 5000,
      idleTimeoutMillis: 10_000,
      keepAlive: true,
      ...(timeout ? { statement_timeout: timeout, query_timeout: timeout + 2000 } : {}),
    })
    // an idle connection the server dropped (a restart, pg_terminate_backend): the pool discards it and connects anew
    this.pool.on('error', () => {})
  }

  /**
   * connects, checks the store's own version and starts listening; every call waits for it. a refusal (a newer
   * Faber's store) stands; a failure to reach the server is tried again by the next call.
   */
  ready(): Promise<void> {
    if (this.closed) return Promise.reject(new StoreError(this.path, 'it is closed'))
    this.opening ??= this.init().catch((error) => {
      if (!/newer than this Faber/.test((error as Error).message)) this.opening = undefined
      throw error
    })
    return this.opening
  }

  private async init() {
    await this.transactionRaw('faber_schema', async (tx) => {
      await tx.run('CREATE TABLE IF NOT EXISTS faber_schema (owner TEXT PRIMARY KEY, version INTEGER NOT NULL)')
      await applyMigrations(tx, this.path, this.driver, STORE_OWNER, STORE_STEPS)
    })
    await this.listen()
  }

  async all<T = Row>(sql: string, params: readonly Param[] = []): Promise<T[]> {
    await this.ready()
    return this.wrap(async () => (await this.pool.query(numbered(sql), params as Param[])).rows as T[])
  }

  async get<T = Row>(sql: string, params?: readonly Param[]): Promise<T | undefined> {
    return (await this.all<T>(sql, params))[0]
  }

  async run(sql: string, params: readonly Param[] = []): Promise<number> {
    await this.ready()
    return this.wrap(async () => (await this.pool.query(numbered(sql), params as Param[])).rowCount ?? 0)
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    await this.ready()
    return this.transactionRaw(undefined, fn)
  }

  async exclusive<T>(key: string, fn: (tx: Queryable) => Promise<T>): Promise<T> {
    await this.ready()
    return this.transactionRaw(key, fn)
  }

  async migrate(owner: string, steps: readonly Migration[]): Promise<void> {
    await this.ready()
    // two hosts starting at once must not both create the tables
    await this.transactionRaw('faber_schema', (tx) => applyMigrations(tx, this.path, this.driver, owner, steps))
  }

  changeMark(table: string): number | undefined {
    return this.listening ? (this.marks.get(table) ?? this.base) : undefined
  }

  get open(): boolean {
    return !this.closed
  }

  async close(): Promise<void> {
    if (this.closed) return
    // calls made before close (a plugin flushing as it is disposed) still run: the pool ends once they are done
    await new Promise((resolve) => setImmediate(resolve))
    this.closed = true
    this.listening = false
    clearTimeout(this.retry)
    await this.listener?.end().catch(() => {})
    await this.pool.end()
  }

  private async transactionRaw<T>(lock: string | undefined, fn: (tx: Queryable) => Promise<T>): Promise<T> {
    const client = await this.wrap(() => this.pool.connect())
    let broken: unknown
    const query = async (sql: string, params: readonly Param[] = []) => {
      try {
        return await client.query(numbered(sql), params as Param[])
      } catch (error) {
        broken ??= error
        throw error
      }
    }
    const tx: Queryable = {
      all: async <R>(sql: string, params?: readonly Param[]) => (await query(sql, params)).rows as R[],
      get: async <R>(sql: string, params?: readonly Param[]) => (await query(sql, params)).rows[0] as R | undefined,
      run: async (sql: string, params?: readonly Param[]) => (await query(sql, params)).rowCount ?? 0,
    }
    try {
      return await this.wrap(async () => {
        await query('BEGIN')
        if (lock !== undefined) await query('SELECT pg_advisory_xact_lock(hashtext(?))', [lock])
        try {
          const result = await fn(tx)
          await query('COMMIT')
          return result
        } catch (error) {
          await client.query('ROLLBACK').catch(() => {})
          throw error
        }
      })
    } finally {
      // a connection a statement failed on is not given back to the pool: it may be one the server dropped
      client.release(broken !== undefined)
    }
  }

  /** settles (never rejects) once the listening connection is up or has failed; a failure is tried again */
  private listen(): Promise<void> {
    if (this.closed || this.listener) return Promise.resolve()
    const client = new pg.Client({ connectionString: this.url, keepAlive: true, connectionTimeoutMillis: 5000 })
    this.listener = client
    const lost = () => {
      if (this.listener !== client) return
      this.listener = undefined
      this.listening = false
      client.end().catch(() => {})
      if (!this.closed) this.retry = setTimeout(() => this.listen(), 250).unref()
    }
    client.on('error', lost)
    client.on('end', lost)
    client.on('notification', (message) => {
      if (message.channel === CHANNEL && message.payload) this.marks.set(message.payload, ++this.sequence)
    })
    return client
      .connect()
      .then(() => client.query(`LISTEN ${CHANNEL}`))
      .then(() => {
        if (this.listener !== client) return
        // whatever changed while nobody listened is unknown: every mark moves
        this.marks.clear()
        this.base = ++this.sequence
        this.listening = true
      }, lost)
  }

  private async wrap<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn()
    } catch (error) {
      if (StoreError.isInstance(error) || !(error instanceof Error)) throw error
      if (!('code' in error) && !/connect|terminat|timeout|Connection/i.test(error.message)) throw error
      throw new StoreError(this.path, describe(error), { cause: error })
    }
  }
}

/** what went wrong, in words an operator acts on */
function describe(error: Error) {
  const code = (error as { code?: string }).code
  if (code === '25006') return `${error.message} (the server is read-only, a replica or default_transaction_read_only: point the store at the primary)`
  if (code === '57014') return `${error.message} (a statement ran past statementTimeout)`
  if (code === '57P01' || code === '57P02' || code === '57P03')
    return `${error.message} (the server is restarting or ended this connection; the next call connects again)`
  if (code === 'ECONNREFUSED' || code === 'ECONNRESET' || code === 'ENOTFOUND')
    return `${error.message} (the database server cannot be reached; calls that need it fail until it is back)`
  if (code === '53100') return `${error.message} (the database server's disk is full)`
  return error.message
}
