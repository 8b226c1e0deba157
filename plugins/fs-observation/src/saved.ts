// observations kept in the deployment's store (table `fs_observations`), keyed by the session that made them, so a
// resumed session (the same session-log id) gets back what its agent had read. writes are queued and committed
// together on the next turn of the event loop: a lost observation only means one more read, never a stale write.

import type { Migration, Store } from '@faber/store'

// at is ms since the epoch: BIGINT on PostgreSQL, where INTEGER is 32-bit
const observationsTable = (integer: string) => `CREATE TABLE fs_observations (
  session TEXT NOT NULL,
  agent TEXT NOT NULL,
  root TEXT NOT NULL,
  path TEXT NOT NULL,
  version TEXT NOT NULL,
  at ${integer} NOT NULL,
  PRIMARY KEY (session, agent, root, path)
)`

const MIGRATIONS: Migration[] = [{ sqlite: `${observationsTable('INTEGER')} STRICT, WITHOUT ROWID`, postgres: observationsTable('BIGINT') }]

const SAVE =
  'INSERT INTO fs_observations (session, agent, root, path, version, at) VALUES (?, ?, ?, ?, ?, ?) ' +
  'ON CONFLICT (session, agent, root, path) DO UPDATE SET version = excluded.version, at = excluded.at'

export interface SavedObservation {
  root: string
  path: string
  version: string
}

export class SavedObservations {
  private queue: (string | number)[][] = []
  private scheduled = false
  private migrated?: Promise<void>
  /** the commit under way: the next waits for it, so writes land in the order they were made */
  private writing: Promise<void> = Promise.resolve()

  constructor(
    readonly store: Store,
    /** told when a commit fails (another process held the store past its busy timeout, a full disk, ...) */
    private onerror: (error: unknown, lost: number) => void = () => {},
  ) {}

  private ready(): Promise<void> {
    this.migrated ??= this.store.migrate('fs-observation', MIGRATIONS).catch((error) => {
      this.migrated = undefined
      throw error
    })
    return this.migrated
  }

  /** what `agent` (its name; '' for none) observed in session `session` */
  async read(session: string, agent: string): Promise<SavedObservation[]> {
    if (!this.store.open) return []
    await this.ready()
    return this.store.all<SavedObservation>('SELECT root, path, version FROM fs_observations WHERE session = ? AND agent = ?', [session, agent])
  }

  write(session: string, agent: string, root: string, path: string, version: string) {
    this.queue.push([session, agent, root, path, version, Date.now()])
    if (this.scheduled) return
    this.scheduled = true
    setImmediate(() => this.flush())
  }

  /** a command ran: nothing saved so far vouches for a file any more, in any session (they share the file system) */
  forgetAll() {
    this.queue = []
    this.commit(async () => {
      await this.store.run('DELETE FROM fs_observations')
    }, 0)
  }

  /**
   * commits what is queued in one transaction, after the commit under way. a commit that fails is reported and its
   * observations are not kept, which costs a resumed session one more read; resolves when it is done either way
   */
  flush(): Promise<void> {
    this.scheduled = false
    const rows = this.queue.splice(0)
    if (!rows.length) return this.writing
    return this.commit(
      () =>
        this.store.transaction(async (tx) => {
          for (const row of rows) await tx.run(SAVE, row)
        }),
      rows.length,
    )
  }

  private commit(fn: () => Promise<void>, count: number): Promise<void> {
    this.writing = this.writing.then(async () => {
      if (!this.store.open) return
      try {
        await this.ready()
        await fn()
      } catch (error) {
        this.onerror(error, count)
      }
    })
    return this.writing
  }
}
