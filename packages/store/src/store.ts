// one SQLite database that several plugins and several processes share: WAL (readers never block the writer), a
// busy timeout (a writer waits for another process's transaction instead of failing), synchronous=FULL (a commit
// that returned is on disk), and immediate transactions (the write lock is taken up front, so two writers never
// deadlock upgrading a read). each user owns its tables and versions them with `migrate`.

import { existsSync, mkdirSync, readFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import Database from 'better-sqlite3'

export class StoreError extends Error {
  constructor(
    readonly path: string,
    problem: string,
  ) {
    super(`the store ${path} cannot be used: ${problem}`)
    this.name = 'StoreError'
  }

  static isInstance(value: unknown): value is StoreError {
    return value instanceof Error && value.name === 'StoreError' && typeof (value as StoreError).path === 'string'
  }
}

export interface StoreOptions {
  /** how long a write waits for another connection's transaction before failing, in ms (default 5000) */
  busyTimeout?: number
  /** open an existing store only; never create one */
  mustExist?: boolean
  /** the bytes of a database to hold in memory instead of opening `path` (see Store.snapshot) */
  image?: Buffer
}

/** a migration step: SQL to run, or a function given the database */
export type Migration = string | ((db: Database.Database) => void)

export class Store {
  readonly path: string
  readonly db: Database.Database
  private versionQuery?: Database.Statement

  constructor(path: string, options: StoreOptions = {}) {
    this.path = path === ':memory:' ? path : resolve(path)
    const { image } = options
    try {
      if (image) this.db = new Database(image)
      else {
        if (this.path !== ':memory:' && !options.mustExist) mkdirSync(dirname(this.path), { recursive: true })
        this.db = new Database(this.path, { fileMustExist: options.mustExist === true })
      }
    } catch (error) {
      throw new StoreError(this.path, (error as Error).message)
    }
    try {
      this.db.pragma(`busy_timeout = ${Math.max(0, Math.floor(options.busyTimeout ?? 5000))}`)
      if (this.path !== ':memory:' && !image) this.db.pragma('journal_mode = WAL')
      this.db.pragma('synchronous = FULL')
      // a process killed mid-write leaves a WAL that SQLite replays or discards on open; check what it left
      const check = this.db.pragma('quick_check', { simple: true })
      if (check !== 'ok') throw new Error(`quick_check says ${JSON.stringify(check)}; restore it from a backup or move it away`)
      this.db.exec('CREATE TABLE IF NOT EXISTS faber_schema (owner TEXT PRIMARY KEY, version INTEGER NOT NULL) STRICT')
    } catch (error) {
      this.db.close()
      throw new StoreError(this.path, (error as Error).message)
    }
  }

  /**
   * an in-memory copy of the store at `path` as it is now, for a dry run (a replay): what is written to it stays in
   * memory. the file is only read; SQLite opens it (read-only) only when a write-ahead log lies beside it, which it
   * would otherwise create. a file that does not exist gives an empty store
   */
  static snapshot(path: string): Store {
    const file = resolve(path)
    if (!existsSync(file)) return new Store(file, { image: Buffer.alloc(0) })
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
      throw new StoreError(file, (error as Error).message)
    }
    // bytes 18 and 19 are the format's write and read versions: 2 (WAL) cannot be held in memory, 1 (rollback) can
    if (image.length >= 20) image[18] = image[19] = 1
    return new Store(file, { image })
  }

  /** runs `fn` in an immediate transaction (the write lock is held from the start); it commits when fn returns */
  transaction<T>(fn: () => T): T {
    return this.db.transaction(fn).immediate()
  }

  /**
   * brings `owner`'s tables to the latest version: steps[i] upgrades version i to i + 1, all in one transaction.
   * a store written by a newer version of the owner is refused rather than misread.
   */
  migrate(owner: string, steps: readonly Migration[]): void {
    this.transaction(() => {
      const row = this.db.prepare('SELECT version FROM faber_schema WHERE owner = ?').get(owner) as { version: number } | undefined
      const version = row?.version ?? 0
      if (version > steps.length) {
        throw new StoreError(this.path, `its ${owner} tables are at version ${version}, newer than this Faber knows (${steps.length}); upgrade Faber`)
      }
      for (const step of steps.slice(version)) typeof step === 'string' ? this.db.exec(step) : step(this.db)
      if (version < steps.length) this.db.prepare('INSERT OR REPLACE INTO faber_schema (owner, version) VALUES (?, ?)').run(owner, steps.length)
    })
  }

  /** a number that changes whenever another connection (another process) commits; cheap to ask */
  get dataVersion(): number {
    this.versionQuery ??= this.db.prepare('PRAGMA data_version').pluck()
    return this.versionQuery.get() as number
  }

  get open(): boolean {
    return this.db.open
  }

  close(): void {
    if (this.db.open) this.db.close()
  }
}
