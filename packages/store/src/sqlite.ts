// the embedded driver: one SQLite file that several plugins and several processes share. WAL (readers never block
// the writer), a busy timeout (a writer waits for another process's transaction instead of failing),
// synchronous=FULL (a commit that returned is on disk), and immediate transactions (the write lock is taken up
// front, so two writers never deadlock upgrading a read). calls run synchronously underneath; a transaction holds
// the file for this process, so other calls of this process (on any connection to it) wait for it rather than
// joining it, or blocking the event loop on a lock it holds.

import { existsSync, mkdirSync, readFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import Database from 'better-sqlite3'
import { applyMigrations, type Migration, type Param, type Queryable, type Row, STORE_OWNER, type Store, StoreError } from './store.ts'

export interface SqliteOptions {
  /** how long a write waits for another connection's transaction before failing, in ms (default 5000) */
  busyTimeout?: number
  /** open an existing store only; never create one */
  mustExist?: boolean
  /** the bytes of a database to hold in memory instead of opening `path` (see SqliteStore.snapshot) */
  image?: Buffer
}

/** per file: settles when the transaction a connection of this process holds on it ends */
const held = new Map<string, Promise<void>>()

async function idle(path: string) {
  for (let busy = held.get(path); busy; busy = held.get(path)) await busy
}

const SCHEMA = 'CREATE TABLE IF NOT EXISTS faber_schema (owner TEXT PRIMARY KEY, version INTEGER NOT NULL) STRICT'

export class SqliteStore implements Store {
  readonly driver = 'sqlite'
  readonly path: string
  readonly db: Database.Database
  private readonly statements = new Map<string, Database.Statement>()
  private versionQuery?: Database.Statement
  private readonly direct: Queryable

  constructor(path: string, options: SqliteOptions = {}) {
    this.path = path === ':memory:' ? path : resolve(path)
    const { image } = options
    try {
      if (image) this.db = new Database(image)
      else {
        if (this.path !== ':memory:' && !options.mustExist) mkdirSync(dirname(this.path), { recursive: true })
        this.db = new Database(this.path, { fileMustExist: options.mustExist === true })
      }
    } catch (error) {
      throw new StoreError(this.path, (error as Error).message, { cause: error })
    }
    const busyTimeout = Math.max(0, Math.floor(options.busyTimeout ?? 5000))
    // two processes opening a new file at once: switching it to WAL answers SQLITE_BUSY at once, without the busy
    // handler (measured: 4 in 30 such pairs failed "database is locked"). every step is idempotent, so the loser tries
    // again, within the busy timeout
    const deadline = Date.now() + busyTimeout
    for (;;) {
      try {
        this.db.pragma(`busy_timeout = ${busyTimeout}`)
        if (this.path !== ':memory:' && !image) this.db.pragma('journal_mode = WAL')
        this.db.pragma('synchronous = FULL')
        // a process killed mid-write leaves a WAL that SQLite replays or discards on open; check what it left
        const check = this.db.pragma('quick_check', { simple: true })
        if (check !== 'ok') throw new Error(`quick_check says ${JSON.stringify(check)}; restore it from a backup or move it away`)
        this.db.exec(SCHEMA)
        this.db.transaction(() => this.migrateNow(STORE_OWNER, [SCHEMA])).immediate()
        break
      } catch (error) {
        if ((error as { code?: unknown }).code === 'SQLITE_BUSY' && Date.now() < deadline) {
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10)
          continue
        }
        this.db.close()
        throw StoreError.isInstance(error) ? error : new StoreError(this.path, (error as Error).message, { cause: error })
      }
    }
    const statement = (sql: string) => {
      let prepared = this.statements.get(sql)
      if (!prepared) this.statements.set(sql, (prepared = this.db.prepare(sql)))
      return prepared
    }
    this.direct = {
      all: async <T>(sql: string, params: readonly Param[] = []) => statement(sql).all(...params) as T[],
      get: async <T>(sql: string, params: readonly Param[] = []) => statement(sql).get(...params) as T | undefined,
      run: async (sql: string, params: readonly Param[] = []) => statement(sql).run(...params).changes,
    }
  }

  /**
   * an in-memory copy of the store at `path` as it is now, for a dry run (a replay): what is written to it stays in
   * memory. the file is only read; SQLite opens it (read-only) only when a write-ahead log lies beside it, which it
   * would otherwise create. a file that does not exist gives an empty store
   */
  static snapshot(path: string): SqliteStore {
    const file = resolve(path)
    if (!existsSync(file)) return new SqliteStore(file, { image: Buffer.alloc(0) })
    let image: Buffer
    try {
      if (existsSync(`${file}-wal`)) {
        const db = new Database(file, { readonly: true, fileMustExist: true })
        try {
          image = db.serialize()
        } finally {
          db.close()
        }
      } else image = readFileSync(file)
    } catch (error) {
      throw new StoreError(file, (error as Error).message, { cause: error })
    }
    // bytes 18 and 19 are the format's write and read versions: 2 (WAL) cannot be held in memory, 1 (rollback) can
    if (image.length >= 20) image[18] = image[19] = 1
    return new SqliteStore(file, { image })
  }

  async all<T = Row>(sql: string, params?: readonly Param[]): Promise<T[]> {
    if (held.has(this.path)) await idle(this.path)
    return this.wrap(() => this.direct.all<T>(sql, params))
  }

  async get<T = Row>(sql: string, params?: readonly Param[]): Promise<T | undefined> {
    if (held.has(this.path)) await idle(this.path)
    return this.wrap(() => this.direct.get<T>(sql, params))
  }

  async run(sql: string, params?: readonly Param[]): Promise<number> {
    if (held.has(this.path)) await idle(this.path)
    return this.wrap(() => this.direct.run(sql, params))
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    // waiting and taking the file are one synchronous step, so two waiters woken together do not both take it
    for (let busy = held.get(this.path); busy; busy = held.get(this.path)) await busy
    let release!: () => void
    held.set(this.path, new Promise((resolve) => (release = resolve)))
    try {
      return await this.wrap(async () => {
        this.db.exec('BEGIN IMMEDIATE')
        try {
          const result = await fn(this.direct)
          this.db.exec('COMMIT')
          return result
        } catch (error) {
          if (this.db.inTransaction) this.db.exec('ROLLBACK')
          throw error
        }
      })
    } finally {
      held.delete(this.path)
      release()
    }
  }

  /** an immediate transaction already excludes every other writer, in this process and the others */
  exclusive<T>(_key: string, fn: (tx: Queryable) => Promise<T>): Promise<T> {
    return this.transaction(fn)
  }

  migrate(owner: string, steps: readonly Migration[]): Promise<void> {
    return this.transaction((tx) => applyMigrations(tx, this.path, this.driver, owner, steps))
  }

  /** synchronous, for the constructor: better-sqlite3 runs every call at once, so the promises are settled */
  private migrateNow(owner: string, steps: readonly Migration[]) {
    const get = this.db.prepare('SELECT version FROM faber_schema WHERE owner = ?').get(owner) as { version: number } | undefined
    if ((get?.version ?? 0) > steps.length) {
      throw new StoreError(this.path, `its ${owner} tables are at version ${get?.version}, newer than this Faber knows (${steps.length}); upgrade Faber`)
    }
    this.db.prepare('INSERT INTO faber_schema (owner, version) VALUES (?, ?) ON CONFLICT (owner) DO NOTHING').run(owner, steps.length)
  }

  /** PRAGMA data_version: changes whenever another connection (another process) commits, whatever the table */
  changeMark(_table: string): number {
    this.versionQuery ??= this.db.prepare('PRAGMA data_version').pluck()
    return this.versionQuery.get() as number
  }

  get open(): boolean {
    return this.db.open
  }

  async close(): Promise<void> {
    // calls made before close (a plugin flushing as it is disposed) still run
    await new Promise((resolve) => setImmediate(resolve))
    if (held.has(this.path)) await idle(this.path)
    if (this.db.open) this.db.close()
  }

  private async wrap<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn()
    } catch (error) {
      if (StoreError.isInstance(error) || !(error instanceof Error) || !('code' in error)) throw error
      throw new StoreError(this.path, error.message, { cause: error })
    }
  }
}
