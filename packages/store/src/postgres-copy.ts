// a PostgreSQL store read into memory, for a dry run (faber replay): everything is written to an in-memory SQLite
// store, and the server is only read, over one connection PostgreSQL itself keeps read-only (the session's
// default_transaction_read_only, and each read in a READ ONLY transaction: the server refuses any write on it). a
// plugin's tables are copied when it migrates the copy, with their rows as the server holds them then.

import pg from 'pg'
import { masked } from './postgres.ts'
import { SqliteStore } from './sqlite.ts'
import { type Migration, type Param, type Queryable, type Row, type Store, StoreError } from './store.ts'

/** a value as node-postgres gives it, as SQLite takes it */
function sqliteValue(value: unknown): Param | Buffer {
  if (value === null || value === undefined) return null
  if (typeof value === 'string' || typeof value === 'number' || Buffer.isBuffer(value)) return value
  if (typeof value === 'boolean') return value ? 1 : 0
  if (typeof value === 'bigint') return value.toString()
  if (value instanceof Date) return value.toISOString()
  return JSON.stringify(value)
}

export class PostgresCopy implements Store {
  readonly driver = 'sqlite'
  readonly path: string
  private readonly memory = new SqliteStore(':memory:')
  private server?: Promise<pg.Client>

  private readonly timeout: number

  /** `statementTimeout` (ms, default 5000 as the store's; 0: none): a read the server holds longer (a table locked) fails */
  constructor(
    private readonly url: string,
    options: { statementTimeout?: number } = {},
  ) {
    this.path = `${masked(url)} (read into memory)`
    this.timeout = options.statementTimeout ?? 5000
  }

  /** a read on the server, in a transaction it keeps read-only; `undefined` for a table it does not have */
  async read<T = Row>(sql: string, params: readonly Param[] = []): Promise<T[] | undefined> {
    this.server ??= (async () => {
      // the whole session read-only, set by the server at connection: a write on it is refused (25006)
      const client = new pg.Client({
        connectionString: this.url,
        options: '-c default_transaction_read_only=on',
        connectionTimeoutMillis: 5000,
        // a table another session holds locked must not hold the replay forever
        ...(this.timeout ? { statement_timeout: this.timeout, query_timeout: this.timeout + 2000 } : {}),
      })
      client.on('error', () => {})
      await client.connect()
      return client
    })()
    let client: pg.Client
    try {
      client = await this.server
    } catch (error) {
      this.server = undefined
      throw new StoreError(this.path, `the server cannot be reached to read it (${(error as Error).message})`, { cause: error })
    }
    try {
      await client.query('BEGIN TRANSACTION READ ONLY')
      try {
        return (await client.query(sql, params as Param[])).rows as T[]
      } finally {
        await client.query('COMMIT')
      }
    } catch (error) {
      const code = (error as { code?: string }).code
      if (code === '42P01') return undefined
      const why = code === '57014' ? ' (a read ran past statementTimeout: is a table held locked by another session?)' : ''
      throw new StoreError(this.path, `${(error as Error).message}${why}`, { cause: error })
    }
  }

  /** migrates the copy, then fills the tables the migration made with the server's rows */
  async migrate(owner: string, steps: readonly Migration[]): Promise<void> {
    const tables = () => new Set(this.memory.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").pluck().all() as string[])
    const before = tables()
    const version = (await this.read<{ version: string | number }>('SELECT version FROM faber_schema WHERE owner = $1', [owner]))?.[0]?.version
    if (Number(version ?? 0) > steps.length) {
      throw new StoreError(this.path, `its ${owner} tables are at version ${version}, newer than this Faber knows (${steps.length}); upgrade Faber`)
    }
    await this.memory.migrate(owner, steps)
    for (const table of tables()) {
      if (before.has(table) || table.startsWith('sqlite_')) continue
      const rows = await this.read(`SELECT * FROM "${table.replace(/"/g, '""')}"`)
      if (!rows?.length) continue
      const columns = new Set((this.memory.db.prepare(`PRAGMA table_info("${table.replace(/"/g, '""')}")`).all() as { name: string }[]).map((c) => c.name))
      // the columns both have: a server at an older version of the tables lacks the newer ones, which keep their defaults
      const shared = Object.keys(rows[0]).filter((name) => columns.has(name))
      const insert = this.memory.db.prepare(
        `INSERT INTO "${table.replace(/"/g, '""')}" (${shared.map((c) => `"${c}"`).join(', ')}) VALUES (${shared.map(() => '?').join(', ')})`,
      )
      this.memory.db.transaction(() => {
        for (const row of rows) insert.run(...shared.map((name) => sqliteValue(row[name])))
      })()
    }
  }

  all<T = Row>(sql: string, params?: readonly Param[]): Promise<T[]> {
    return this.memory.all<T>(sql, params)
  }

  get<T = Row>(sql: string, params?: readonly Param[]): Promise<T | undefined> {
    return this.memory.get<T>(sql, params)
  }

  run(sql: string, params?: readonly Param[]): Promise<number> {
    return this.memory.run(sql, params)
  }

  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    return this.memory.transaction(fn)
  }

  exclusive<T>(key: string, fn: (tx: Queryable) => Promise<T>): Promise<T> {
    return this.memory.exclusive(key, fn)
  }

  changeMark(table: string): number | undefined {
    return this.memory.changeMark(table)
  }

  get open(): boolean {
    return this.memory.open
  }

  async close(): Promise<void> {
    const server = this.server
    this.server = undefined
    await server?.then((client) => client.end()).catch(() => {})
    await this.memory.close()
  }
}
