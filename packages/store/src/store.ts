// the contract both drivers keep: one async API over SQL written once (`?` placeholders), migrations versioned per
// owner in `faber_schema`, and a change mark a reader checks before trusting what it cached.

export class StoreError extends Error {
  constructor(
    readonly path: string,
    problem: string,
    options?: { cause?: unknown },
  ) {
    super(`the store ${path} cannot be used: ${problem}`, options)
    this.name = 'StoreError'
  }

  static isInstance(value: unknown): value is StoreError {
    return value instanceof Error && value.name === 'StoreError' && typeof (value as StoreError).path === 'string'
  }
}

export type Param = string | number | null
/** a row as a driver returns it; on PostgreSQL a BIGINT column comes back as a string */
export type Row = Record<string, unknown>

/** statements, in the SQL both drivers accept, with `?` placeholders */
export interface Queryable {
  all<T = Row>(sql: string, params?: readonly Param[]): Promise<T[]>
  get<T = Row>(sql: string, params?: readonly Param[]): Promise<T | undefined>
  /** runs a statement; resolves with the number of rows it changed */
  run(sql: string, params?: readonly Param[]): Promise<number>
}

/** a migration step: SQL both drivers run, or the SQL of each ('' where a driver has nothing to do) */
export type Migration = string | { sqlite: string; postgres: string }

export interface Store extends Queryable {
  readonly driver: 'sqlite' | 'postgres'
  /** the file, or the URL with its password masked: for messages */
  readonly path: string
  readonly open: boolean
  /** runs fn in one transaction (holding the write lock on SQLite from the start); commits when fn resolves */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>
  /**
   * fn in a transaction that holds `key` against every other connection (an advisory lock on PostgreSQL, the write
   * lock on SQLite) until it commits: what one process does at a time across all of them
   */
  exclusive<T>(key: string, fn: (tx: Queryable) => Promise<T>): Promise<T>
  /**
   * brings `owner`'s tables to the latest version: steps[i] upgrades version i to i + 1, all in one transaction. a
   * store written by a newer version of the owner is refused rather than misread.
   */
  migrate(owner: string, steps: readonly Migration[]): Promise<void>
  /**
   * a number that changes when another connection may have changed `table`; undefined when the store cannot tell
   * (PostgreSQL while its listening connection is down): read again then. cheap and synchronous.
   */
  changeMark(table: string): number | undefined
  close(): Promise<void>
}

/** the version of the store's own tables (`faber_schema`, PostgreSQL's change trigger) this Faber writes */
export const STORE_OWNER = 'faber-store'

/** shared by both drivers: the steps of `owner` not yet applied, inside the caller's transaction */
export async function applyMigrations(tx: Queryable, path: string, driver: Store['driver'], owner: string, steps: readonly Migration[]) {
  const row = await tx.get<{ version: number | string }>('SELECT version FROM faber_schema WHERE owner = ?', [owner])
  const version = Number(row?.version ?? 0)
  if (version > steps.length) {
    throw new StoreError(path, `its ${owner} tables are at version ${version}, newer than this Faber knows (${steps.length}); upgrade Faber`)
  }
  for (const step of steps.slice(version)) {
    const sql = typeof step === 'string' ? step : step[driver]
    if (sql) await tx.run(sql)
  }
  if (version < steps.length) {
    await tx.run('INSERT INTO faber_schema (owner, version) VALUES (?, ?) ON CONFLICT (owner) DO UPDATE SET version = excluded.version', [owner, steps.length])
  }
}
